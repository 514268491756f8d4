#!/usr/bin/env bash
# For the next session (commit in $1, the tree without bench/tmp-call/s43/producer-addresses.patch): the producer
# warp's scale copies with their addresses worked out once a tile (the same copies, so the same bits; not yet run
# on a GPU). Applies the patch, builds it (build-gpu) and the tree without it (build-base); the grouped-GEMM,
# tensor-core and layer suites on the patched build; deepseek-v3 fp8 and deepseek-v4-flash fp4 (block-exact) at
# 16384 tokens, patched against base, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+producer-addresses
start=$SECONDS
mkdir -p $OUT/t
P=bench/tmp-call/s43/producer-addresses.patch
patch -p1 < $P || exit 1
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
grep -E "^\[  FAILED|Failure|Expected|Which is|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=220
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
X=STEADYMOE_FP4_BLOCK_EXACT=1
bench_run v3 - "${v3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run v3base - "${v3[@]}"
BENCH_CLI=./build-base/steadymoe bench_run v4base $X "${v4[@]}"; bench_run v4 $X "${v4[@]}"
BENCH_CLI=./build-base/steadymoe bench_run v3base2 - "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
compare_named v3base v3 v3base2 v3-2 v4base v4
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
