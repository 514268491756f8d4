#!/usr/bin/env bash
# Call 5 (b448ec0, the mends after review: a_index read after the producer's wait, the copy's k check, the split
# unaligned-gather tests): the gathers, the layer and tensor_core's tests, with and without early weights.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu test_cuda_gathers test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_gathers test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_layer STEADYMOE_EARLY_WEIGHTS=1
run_test test_cuda_tensor_core STEADYMOE_EARLY_WEIGHTS=1 '*Graph*:*Bitwise*:*Invarian*'
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
