#!/usr/bin/env bash
# Call 5 (commit in $1: release-tall.patch landed, the top-32 routing case added): the suites at the final
# tree, then deepseek-v3 fp8 at 16384 tokens (shared expert after) once, for its digest against call 3's.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_routing
run_test test_cuda_permutation
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
run_test test_cuda_layer
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=280
bench_run v3 STEADYMOE_SHARED_FORK=after --workload deepseek-v3 --format fp8 --tokens 16384
compare_named v3 > /dev/null 2>&1
cat $OUT/stages.md 2>/dev/null
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
