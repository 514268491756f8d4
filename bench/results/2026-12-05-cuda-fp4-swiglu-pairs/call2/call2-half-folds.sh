#!/usr/bin/env bash
# Call 2 (commit in $1; the tree without bench/tmp-call/s46/half-folds.patch): half folds. The tiled kernel's
# e4m3 stages (FP8 weights meeting e4m3 rows; block-exact FP4 blocks converted to FP8 tiles) issue each stage's
# MMAs as two groups of m64n64k32 (the 128 features' halves, into the same accumulators), and fold the first
# half's sums while the second half's MMAs run: a warpgroup's tensor cores wait on half a fold a block, not a
# whole one; the same sums and folds, so the same bits; about the same registers (ptxas here: one FP8 kernel
# one more, the clusters-of-four one 11 fewer, the rest as before; no spills, no serialised MMAs, and the
# converted kernels' injected waits gone). The last profile had the FP8 gate/up's warps waiting on
# their MMAs in 14.3% of samples. build-gpu: the patch; build-base: without it (same machine).
# Tests first (the FP8 tiled tests compare bits with float64 and the decode kernel; block-exact FP4's with the
# FP8 kernels'), then at 16384 tokens deepseek-v3 fp8 and deepseek-v4-flash block-exact fp4 base / new / new /
# base, deepseek-v4-flash fp8 base / new, and deepseek-v3 fp8 at 1024 base / new; deepseek-v3 bf16 by default
# (weight pairs on both GEMMs) against STEADYMOE_WEIGHT_PAIRS=0, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+half-folds
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
P=bench/tmp-call/s46/half-folds.patch
patch -p1 < $P || exit 1
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
timeout 90 build-gpu/tests/test_cuda_grouped_gemm > $OUT/t/first.log 2>&1
rc=$?; echo "grouped-GEMM suite: rc=$rc $(grep -c '^\[       OK' $OUT/t/first.log) OK"; grep -E "FAILED|Failure|Expected|Which is" $OUT/t/first.log | head -20
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_grouped_gemm "STEADYMOE_FP4_BLOCK_EXACT=1" '*BlockExact*'
run_test test_cuda_grouped_gemm "STEADYMOE_WEIGHT_PAIRS=1" "*BlockExact*:*PersistentSwiGlus*"
run_test test_cuda_tensor_core
run_test test_cuda_layer
build_base $P steadymoe_cli || exit 1
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=500
B=./build-base/steadymoe
X=STEADYMOE_FP4_BLOCK_EXACT=1
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
v4f=(--workload deepseek-v4-flash --format fp8 --tokens 16384)
BENCH_CLI=$B bench_run v3base1 - "${v3[@]}"; bench_run v3new1 - "${v3[@]}"
bench_run v3new2 - "${v3[@]}"; BENCH_CLI=$B bench_run v3base2 - "${v3[@]}"
BENCH_CLI=$B bench_run v4base1 $X "${v4[@]}"; bench_run v4new1 $X "${v4[@]}"
bench_run v4new2 $X "${v4[@]}"; BENCH_CLI=$B bench_run v4base2 $X "${v4[@]}"
BENCH_CLI=$B bench_run v4fbase - "${v4f[@]}"; bench_run v4fnew - "${v4f[@]}"
BENCH_CLI=$B bench_run v3kbase - --workload deepseek-v3 --format fp8 --tokens 1024; bench_run v3knew - --workload deepseek-v3 --format fp8 --tokens 1024
v3b=(--workload deepseek-v3 --format bf16 --tokens 16384); O=STEADYMOE_WEIGHT_PAIRS=0
bench_run v3b - "${v3b[@]}"; bench_run v3boff $O "${v3b[@]}"; bench_run v3boff2 $O "${v3b[@]}"; bench_run v3b2 - "${v3b[@]}"
compare_named v3base1 v3new1 v3new2 v3base2 v4base1 v4new1 v4new2 v4base2 v4fbase v4fnew v3kbase v3knew v3b v3boff v3boff2 v3b2 > /dev/null
cat $OUT/stages.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
