#!/usr/bin/env bash
# Call 2 (s33): block-exact FP4 decode with two blocks' MMAs interleaved, four CTAs to an SM in every decode launch
# (commit in $1). FP4 grouped-GEMM tests (default and STEADYMOE_FP4_BLOCK_EXACT=0) and the layer's; then
# deepseek-v4-flash at 1, 8, 128, 256 tokens, block-exact against per-32 (STEADYMOE_FP4_BLOCK_EXACT=0), twice
# each in alternating order, traces at 1 and 8.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm STEADYMOE_UNSET=1 '*Fp4*:*BlockExact*:*FewRow*:*Indexed*'
run_test test_cuda_grouped_gemm STEADYMOE_FP4_BLOCK_EXACT=0 '*Fp4*:*BlockExact*'
run_test test_cuda_layer
grep -E "^\[  FAILED|Failure|Expected|Which is|differ" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
d=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256 --trace)
BENCH_BUDGET_S=500
bench_run exact - "${d[@]}"; bench_run per32 STEADYMOE_FP4_BLOCK_EXACT=0 "${d[@]}"
bench_run per32-2 STEADYMOE_FP4_BLOCK_EXACT=0 "${d[@]}"; bench_run exact-2 - "${d[@]}"
compare_named exact per32 per32-2 exact-2
runs=(); for n in exact per32 per32-2 exact-2; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
(( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
