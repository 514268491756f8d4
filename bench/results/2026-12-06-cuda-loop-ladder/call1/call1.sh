#!/usr/bin/env bash
# Call 1 (session 47) at $1 plus carried-descriptors.patch (the tiled kernels carry each stage's operand
# descriptors from stage to stage in place of rebuilding them from the shared-memory address each block).
# The probes first: probe_fp8_loop_ladder (never run) and probe_wgmma_operand_rate (finite random e4m3 now),
# twice each; then the tests with the patch, the base built beside, and deepseek-v3 fp8 at 16384 tokens with
# the shared expert after the routed experts, patched against base alternating (two pairs).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/tmp-call/s50/carried-descriptors.patch
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core \
  $(ls bench/probes/*.cu | sed 's|bench/probes/\(.*\)\.cu|probe_\1|') || exit 1
grep -c "C7514\|C7512\|bytes spill" $OUT/t/build.log
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
for r in 1 2; do
  timeout 60 build-gpu/probes/probe_fp8_loop_ladder > $OUT/ladder-$r.md 2>&1
  timeout 90 build-gpu/probes/probe_wgmma_operand_rate > $OUT/wgmma-$r.md 2>&1
done
cat $OUT/ladder-1.md $OUT/ladder-2.md $OUT/wgmma-2.md
echo "probes done at $((SECONDS-start)) s"
{
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} >> $OUT/tests.txt 2>&1
tail -8 $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=540
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
B=./build-base/steadymoe
K=STEADYMOE_SHARED_FORK=after
bench_run v3new $K "${v3[@]}"
BENCH_CLI=$B bench_run v3base $K "${v3[@]}"
BENCH_CLI=$B bench_run v3base2 $K "${v3[@]}"
bench_run v3new2 $K "${v3[@]}"
compare_named v3new v3base v3base2 v3new2 > /dev/null
cat $OUT/stages.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
