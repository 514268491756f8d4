#!/usr/bin/env bash
# test_cuda_gathers at $1 (stale pair rows far below 0 and far past every row), and memcheck on the two
# pair-row tests. Carried: bash bench/carry_build.sh test_cuda_gathers.
set -u
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu test_cuda_gathers || exit 1
run_test test_cuda_gathers
memcheck test_cuda_gathers "*IntoTheirPairsRows*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -E "^\[ +(OK|FAILED) +\].*Pairs" $OUT/t/gpu-tests.log
cd $OUT && tar czf t.tgz t && rm -rf t
