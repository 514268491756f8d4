#!/usr/bin/env bash
# Call 4 (s31): the mends after review (memset then synchronise, the group switch on the pair path, the test's
# stale rows past the live bound): the gathers, layer and tensor_core tests, the layer with
# STEADYMOE_QUANTISE_ROWS=group, memcheck on the quantiser tests.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu test_cuda_gathers test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_gathers test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_layer STEADYMOE_QUANTISE_ROWS=group
run_test test_cuda_tensor_core STEADYMOE_QUANTISE_ROWS=group '*Graph*:*Bitwise*:*Invarian*'
memcheck test_cuda_gathers '*Quantis*:*Pairs*:*AsOnTheCpu*'
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
