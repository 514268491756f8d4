#!/usr/bin/env bash
# Call 16 (prepared in the sixtieth session, run in the sixty-first as `bash .../call16/call16.sh
# 07ac4ab+quantise-units.patch`, the patch since committed as 5bd8d30): the row quantiser taking 16 values a
# lane in batches of 512 rows or more and a source word a lane below (as before call 14's form), at $1 = a
# tree with `git apply bench/results/2026-12-07-cuda-quantise-units/next-call/quantise-units.patch`, against
# $2 = the same tree without it (its CLI carried in build-base-carry/base.tar.gz, built here by `cmake
# --build` of the carried build's folder before applying the patch, packed by `tar czf base.tar.gz
# steadymoe`). Tests: test_cuda_gathers (the quantiser against the group gather and the CPU),
# test_cuda_tensor_core, test_cuda_layer; memcheck on the gathers' quantiser tests. Bench, the two builds
# alternating twice: deepseek-v4-flash fp4 at 1 and 16384 tokens; deepseek-v3 fp8 at 16384 once each. Carried:
# bash bench/carry_build.sh steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer with the
# patch applied (build-carry-packed), and build-base-carry. Keep the patch if the one-token layer is level and
# prefill as in call 14 (bench/results/2026-12-07-cuda-quantise-units.md).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
( cd build-base-carry && tar xzf base.tar.gz )
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_gathers
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_gathers "*Quantis*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-300}
for r in 1 2; do
  specs=(deepseek-v4-flash:fp4:1,16384); (( r == 1 )) && specs+=(deepseek-v3:fp8:16384)
  for wl in "${specs[@]}"; do
    IFS=: read -r w f t <<< "$wl"
    n=${w#deepseek-}
    bench_run $n-new-$r - --workload $w --format $f --tokens $t
    BENCH_CLI=./build-base-carry/steadymoe bench_run $n-base-$r - --workload $w --format $f --tokens $t
  done
done
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
