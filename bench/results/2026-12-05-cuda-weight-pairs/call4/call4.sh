#!/usr/bin/env bash
# Call 4 (commit in $1): weight pairs by default where a weight column holds 4 KiB, as committed. The grouped-GEMM
# suite (its new default-rule test first, under a hang guard), the same with STEADYMOE_WEIGHT_PAIRS=1 on the
# cluster tests, the layer and tensor-core suites; then deepseek-v3 fp8, deepseek-v4-flash fp8 and deepseek-v3
# bf16 at 16384 tokens by default against STEADYMOE_WEIGHT_PAIRS=0, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
timeout 90 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*WeightPairsTake*' > $OUT/t/first.log 2>&1
rc=$?; echo "default-rule test: rc=$rc"; grep -E "OK \]|FAILED|Failure|first at|Expected|Which is" $OUT/t/first.log | head -20
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm "STEADYMOE_WEIGHT_PAIRS=1 STEADYMOE_PARKED_SWIGLU=0" '*EveryTiledSchedule*:*Clustered*:*WeightPairsTake*'
run_test test_cuda_grouped_gemm "STEADYMOE_WEIGHT_PAIRS=0" '*EveryTiledSchedule*:*Clustered*:*WeightPairsTake*'
run_test test_cuda_layer
run_test test_cuda_tensor_core
grep -E "^\[  FAILED|Failure|Expected|Which is|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=400
O=STEADYMOE_WEIGHT_PAIRS=0
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4=(--workload deepseek-v4-flash --format fp8 --tokens 16384)
v3b=(--workload deepseek-v3 --format bf16 --tokens 16384)
for i in 1 2; do
  bench_run v3off-$i $O "${v3[@]}"; bench_run v3-$i - "${v3[@]}"
  bench_run v4off-$i $O "${v4[@]}"; bench_run v4-$i - "${v4[@]}"
done
bench_run v3boff-1 $O "${v3b[@]}"; bench_run v3b-1 - "${v3b[@]}"
compare_named v3off-1 v3-1 v3off-2 v3-2 v4off-1 v4-1 v4off-2 v4-2 v3boff-1 v3b-1 > /dev/null
cat $OUT/stages.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
