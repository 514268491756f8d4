#!/usr/bin/env bash
# Call 2 (session 47) at $1 plus early-stage-test.patch (scaled tiled GEMMs test the next stage's full barrier
# while a block's MMAs run and skip the try-wait at the loop's top where it had landed) and the ladder probe's
# new rows (the same test in the probe). Probes, tests with the patch, the base built beside, then alternating
# patched / base: deepseek-v3 fp8 at 16384 tokens with the shared expert after (two pairs), deepseek-v4-flash fp8
# the same (one pair), deepseek-v3 fp8 as served (one pair).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/tmp-call/s50/early-stage-test.patch
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core probe_fp8_loop_ladder || exit 1
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
for r in 1 2; do timeout 60 build-gpu/probes/probe_fp8_loop_ladder > $OUT/ladder-$r.md 2>&1; done
cat $OUT/ladder-1.md $OUT/ladder-2.md
echo "probes done at $((SECONDS-start)) s"
{
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} >> $OUT/tests.txt 2>&1
tail -7 $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=500
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v48=(--workload deepseek-v4-flash --format fp8 --tokens 16384)
B=./build-base/steadymoe
K=STEADYMOE_SHARED_FORK=after
bench_run v3new $K "${v3[@]}"
BENCH_CLI=$B bench_run v3base $K "${v3[@]}"
bench_run v48new $K "${v48[@]}"
BENCH_CLI=$B bench_run v48base $K "${v48[@]}"
BENCH_CLI=$B bench_run v3base2 $K "${v3[@]}"
bench_run v3new2 $K "${v3[@]}"
bench_run v3served - "${v3[@]}"
BENCH_CLI=$B bench_run v3servedbase - "${v3[@]}"
compare_named v3new v3base v3base2 v3new2 v48new v48base v3served v3servedbase > /dev/null
cat $OUT/stages.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
