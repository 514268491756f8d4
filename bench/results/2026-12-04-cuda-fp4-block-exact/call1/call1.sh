#!/usr/bin/env bash
# Call 1 (s33): block-exact FP4 (24d3308): the FP4 x e4m3 decode kernel's FP8 arithmetic for weights whose every
# 128x128 block converts exactly to e4m3 codes. Tests (codecs, grouped GEMM default and with
# STEADYMOE_FP4_BLOCK_EXACT=0, layer, tensor core), memcheck on the FP4 grouped-GEMM tests, then deepseek-v4-flash
# at 1, 8 tokens (traces) and at 4096, 16384 tokens, block-exact against per-32 (STEADYMOE_FP4_BLOCK_EXACT=0).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_codecs test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_codecs STEADYMOE_UNSET=1 '*Fp4*'
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_FP4_BLOCK_EXACT=0 '*Fp4*:*BlockExact*'
run_test test_cuda_layer
run_test test_cuda_tensor_core
memcheck test_cuda_grouped_gemm '*BlockExact*:*Fp4Meeting*'
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|relative error|CTAs per SM" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
d=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
p=(--workload deepseek-v4-flash --format fp4 --tokens 4096,16384)
BENCH_BUDGET_S=420
bench_run exact - "${p[@]}"; bench_run per32 STEADYMOE_FP4_BLOCK_EXACT=0 "${p[@]}"
BENCH_BUDGET_S=470
bench_run exact-d - "${d[@]}"; bench_run per32-d STEADYMOE_FP4_BLOCK_EXACT=0 "${d[@]}"
compare_named exact per32 exact-d per32-d
grep -h "FP4 weights x FP8" $OUT/bench.txt | sort | uniq -c
for set in "exact-d per32-d"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
