#!/usr/bin/env bash
# Call B (s36; commit in $1): the earlier sessions' switched paths — block-exact FP4 weights on the tiled kernel
# (STEADYMOE_FP4_EXACT_TILED=1), wide bf16 CTAs (STEADYMOE_WIDE_CTAS=1), persistent items by expert
# (STEADYMOE_ITEM_ORDER=experts): their tests (as ctest's switched entries run them), memcheck on each path's
# grouped-GEMM tests; then one alternating pair each at 16384 tokens: qwen3 bf16 128-wide / wide, deepseek-v3
# fp8 tile order / by expert, deepseek-v4-flash block-exact on the decode kernel / tiled.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
T="STEADYMOE_FP4_EXACT_TILED=1" W="STEADYMOE_WIDE_CTAS=1" X="STEADYMOE_ITEM_ORDER=experts" E="STEADYMOE_FP4_BLOCK_EXACT=1"
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm "$T" '*BlockExact*'
run_test test_cuda_tensor_core "$T" '*block_exact*:*BlockExact*'
run_test test_cuda_grouped_gemm "$W" '*EveryTiledSchedule*:*Bf16Epilogues*'
run_test test_cuda_tensor_core "$W" '*/bf16'
run_test test_cuda_grouped_gemm "$X" '*EveryTiledSchedule*:*Bf16Epilogues*'
run_test test_cuda_tensor_core "$X" '*CudaTensorCore.*'
run_test test_cuda_layer "$X" '*CudaDemoLayer.*'
STEADYMOE_FP4_EXACT_TILED=1 memcheck test_cuda_grouped_gemm '*BlockExactFp4GivesTheFp8KernelsBits*'
mv $OUT/t/memcheck-test_cuda_grouped_gemm.log $OUT/t/memcheck-exact-tiled.log
STEADYMOE_WIDE_CTAS=1 STEADYMOE_ITEM_ORDER=experts memcheck test_cuda_grouped_gemm 'NBlocks/EveryTiledSchedule.GivesTheExactResult/1'
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|kernel$|block-exact|paired|wide" $OUT/t/gpu-tests.log | head -50
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=500
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
bench_run q128 - "${q[@]}"; bench_run qwide "$W" "${q[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3x "$X" "${v3[@]}"
bench_run exact "$E" "${v4[@]}"; bench_run tiled "$E $T" "${v4[@]}"
bench_run qwide2 "$W" "${q[@]}"; bench_run q128-2 - "${q[@]}"
bench_run v3x2 "$X" "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
compare_named q128 qwide v3 v3x exact tiled qwide2 q128-2 v3x2 v3-2
cd $OUT && tar czf t.tgz t && rm -rf t
