#!/usr/bin/env bash
# Call 5 at $1: call 4's tensor-core failure (an illegal instruction in the fp8 layer at 300 tokens) under
# compute-sanitizer, and the same test with STEADYMOE_BLOCK_MAJOR_SCALES=0.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
build_gpu test_cuda_tensor_core || exit 1
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
F='Formats/CudaTensorCore.MatchesTheCpuBackendWithinRounding/fp8'
STEADYMOE_BLOCK_MAJOR_SCALES=0 timeout 60 build-gpu/tests/test_cuda_tensor_core --gtest_filter=$F > $OUT/off.txt 2>&1; echo "off rc=$?"
timeout 120 $san --tool memcheck --show-backtrace device build-gpu/tests/test_cuda_tensor_core --gtest_filter=$F > $OUT/san.txt 2>&1; echo "sanitizer rc=$?"
grep -E "OK \]|FAILED \]" $OUT/off.txt
grep -m3 -B2 -A12 "Illegal\|illegal\|Invalid\|=========" $OUT/san.txt | cut -c1-300 | head -60
echo "done at $((SECONDS - start)) s"
