#!/usr/bin/env bash
# Call 6 (commit in $1 plus the working tree's tall tiles): the ladder probe's new rows; the tall-tile test and
# the suites by default and with STEADYMOE_TALL_TILES=1; memcheck on the tall test; deepseek-v3 fp8 at 16384
# tokens, tall tiles against the default, alternating (shared expert after), then as served.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
/usr/local/cuda/bin/nvcc -Iinclude -O3 -std=c++20 --generate-code=arch=compute_90a,code=[sm_90a] \
  bench/probes/fp8_loop_ladder.cu -o /tmp/ladder > $OUT/t/probe-build.txt 2>&1 && /tmp/ladder | grep -E "3 warpgroups|level|---" > $OUT/probe.txt &
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
grep -E "Li3ELi1E" -A3 $OUT/t/build.log | grep -E "spill|Used" | head -8
wait
cat $OUT/probe.txt
T=STEADYMOE_TALL_TILES=1
run_test test_cuda_grouped_gemm $T "*TallTiles*"
run_test test_cuda_tensor_core $T
run_test test_cuda_layer $T
run_test test_cuda_grouped_gemm "" "*TallTiles*:*BlockMajor*:*Parked*:*EveryTiledSchedule*:*Persistent*:*Clustered*:*WeightPairs*"
run_test test_cuda_tensor_core
grep -h "FAILED\|Failure\|tall tiles" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
STEADYMOE_TALL_TILES=1 memcheck test_cuda_grouped_gemm "*TallTiles*"
source bench/bench_runs.sh
BENCH_BUDGET_S=500
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
A=STEADYMOE_SHARED_FORK=after
bench_run v3 $A $v3
bench_run v3-tall "$A $T" $v3
bench_run v3-tall2 "$A $T" $v3
bench_run v3-2 $A $v3
bench_run v3-served - $v3
bench_run v3-served-tall $T $v3
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
grep -h "tall\|kernels\|path" $OUT/t/v3-tall.log | head -5
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
