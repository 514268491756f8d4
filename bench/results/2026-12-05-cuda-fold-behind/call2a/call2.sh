#!/usr/bin/env bash
# Call 2 (s43; commit in $1): folds behind the MMAs (e4m3 rows meeting FP8 weights, persistent CTAs with parked
# epilogues; registers moved to the consumers): the new test first (a hang ends the call), test_cuda_grouped_gemm
# by default and its FP8 tests with STEADYMOE_FOLD_BEHIND=0, the tensor-core suite by default and with every
# epilogue parked, the layers, memcheck on the new test; deepseek-v3 fp8 at 1024 and 16384 tokens against
# STEADYMOE_FOLD_BEHIND=0, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
timeout 60 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*FoldsBehind*' > $OUT/t/first.log 2>&1
rc=$?; echo "the new test alone: rc=$rc"; tail -5 $OUT/t/first.log
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_FOLD_BEHIND=0 '*FoldsBehind*:*BlockExact*:*Clustered*:*Persistent*'
run_test test_cuda_tensor_core
run_test test_cuda_tensor_core STEADYMOE_PARKED_EPILOGUES=1
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm '*FoldsBehind*'
grep -E "^\[  FAILED|Failure|Expected|Which is|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=480
off=STEADYMOE_FOLD_BEHIND=0
v3=(--workload deepseek-v3 --format fp8 --tokens 1024,16384)
bench_run v3 - "${v3[@]}"; bench_run v3off $off "${v3[@]}"
bench_run v3off2 $off "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
compare_named v3 v3off v3off2 v3-2
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
