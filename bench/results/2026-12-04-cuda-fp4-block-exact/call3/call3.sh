#!/usr/bin/env bash
# Call 3 (s33): block-exact FP4 on request (STEADYMOE_FP4_BLOCK_EXACT=1; commit in $1). Tests: codecs, grouped GEMM,
# layer and tensor-core tests by default and with the request; memcheck on the block-exact grouped-GEMM tests; then
# deepseek-v4-flash at 4096, 16384 and at 1, 8 tokens, per-32 (default) against block-exact, one pair each.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_codecs test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_codecs STEADYMOE_UNSET=1 '*Fp4*'
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_FP4_BLOCK_EXACT=1
run_test test_cuda_tensor_core
run_test test_cuda_tensor_core STEADYMOE_FP4_BLOCK_EXACT=1
memcheck test_cuda_grouped_gemm '*BlockExact*:*Fp4Meeting*'
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|block-exact|fp4" $OUT/t/gpu-tests.log | head -60
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
d=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
p=(--workload deepseek-v4-flash --format fp4 --tokens 4096,16384)
BENCH_BUDGET_S=430
bench_run per32 - "${p[@]}"; bench_run exact STEADYMOE_FP4_BLOCK_EXACT=1 "${p[@]}"
BENCH_BUDGET_S=480
bench_run exact-d STEADYMOE_FP4_BLOCK_EXACT=1 "${d[@]}"; bench_run per32-d - "${d[@]}"
compare_named per32 exact exact-d per32-d
grep -h "FP4 weights x FP8" $OUT/bench.txt | sort | uniq -c
runs=(); for n in exact-d per32-d; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
(( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
