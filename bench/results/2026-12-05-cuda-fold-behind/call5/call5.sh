#!/usr/bin/env bash
# Call 5 (s43; commit in $1): the kept code (the kernel of 1b323d8, the new test over every block count):
# test_cuda_grouped_gemm whole, the tensor-core suite with every epilogue parked, memcheck on the new test.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
build_gpu test_cuda_grouped_gemm test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core STEADYMOE_PARKED_EPILOGUES=1
memcheck test_cuda_grouped_gemm '*ParkedFp8*'
grep -E "^\[  FAILED|Failure|Expected|Which is|first at|ParkedFp8" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
