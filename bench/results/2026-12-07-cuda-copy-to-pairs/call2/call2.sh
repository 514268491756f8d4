#!/usr/bin/env bash
# The session's final tree ($1): test_cuda_gathers, test_cuda_tensor_core and test_cuda_layer; memcheck,
# initcheck and racecheck on the copy into pairs' rows; then deepseek-v3 bf16 at 16384 tokens, copy to pairs
# against STEADYMOE_COPY_TO_PAIRS=0, once each (its 235 MB of tokens read once, against eight times); then the
# weight-stream probe (bench/probes/weight_stream_rate.cu) on fresh memory, timed by its CTAs too.
# Carried: bash bench/carry_build.sh steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer
# (build-carry-packed), and the probe's program in build-probe/.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_gathers
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_gathers "*CopiedIntoTheirPairs*"
for tool in initcheck racecheck; do
  timeout 100 $san --tool $tool build-gpu/tests/test_cuda_gathers --gtest_filter="*CopiedIntoTheirPairs*" \
    > $OUT/t/$tool.log 2>&1
  echo "$tool on test_cuda_gathers *CopiedIntoTheirPairs*: rc=$? $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-300}
v3=(--workload deepseek-v3 --format bf16 --tokens 16384)
bench_run v3-pairs - "${v3[@]}"
bench_run v3-gather STEADYMOE_COPY_TO_PAIRS=0 "${v3[@]}"
bench_points
timeout 120 build-probe/probe_weight_stream_rate > $OUT/stream.txt 2>&1
echo "probe rc=$?"; cat $OUT/stream.txt
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
