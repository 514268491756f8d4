#!/usr/bin/env bash
# Call 5 (commit in $1: release-tall.patch landed, the top-32 routing case added), cut to the device time left:
# the routing suite (its new top-32 case has not run yet) and the grouped GEMM suite at the final tree.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu test_cuda_routing test_cuda_grouped_gemm || exit 1
run_test test_cuda_routing
run_test test_cuda_grouped_gemm
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
