#!/usr/bin/env bash
# Call 3 (s41; commit in $1, with named.patch: the parked hand-off through named barriers, the epilogue warps
# now waiting at `drained`; upload layouts into reused buffers, the next batch's made while one is copied):
# the hand-off probe under racecheck in three forms; racecheck on the grouped GEMM's parked tests (SwiGLU,
# scatter, F32 results); the grouped GEMM, layer and tensor-core suites; qwen3 bf16 at 16384 tokens against
# build-base (named.patch taken off), alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I include -o $OUT/t/probe \
  bench/probes/racecheck_parked_handoff.cu > $OUT/t/probe-build.log 2>&1; echo "probe build rc=$?"
for m in mbarrier named named-drained-sync; do
  $OUT/t/probe $m > $OUT/t/probe-$m-plain.log 2>&1; echo "probe $m (no sanitizer): rc=$? $(tail -1 $OUT/t/probe-$m-plain.log)"
  timeout 60 $san --tool racecheck --racecheck-report all $OUT/t/probe $m > $OUT/t/probe-$m.log 2>&1
  echo "racecheck probe $m: rc=$? $(grep -h 'RACECHECK SUMMARY' $OUT/t/probe-$m.log | tail -1); by kind: $(grep -o 'Potential [A-Z]* hazard' $OUT/t/probe-$m.log | sort | uniq -c | tr '\n' ' ')"
done
echo "probe done at $((SECONDS-start)) s"
} > $OUT/probe.txt 2>&1
cat $OUT/probe.txt
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
for f in PersistentSwiGlus PersistentScatters EveryTiledSchedule.GivesTheExactResult/0; do
  timeout 100 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter="*$f*" \
    > $OUT/t/racecheck-${f%%.*}.log 2>&1; echo "racecheck $f: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck-${f%%.*}.log | tail -1) $(grep -c '^\[       OK' $OUT/t/racecheck-${f%%.*}.log) OK at $((SECONDS-start)) s"
done
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
build_base bench/tmp-call/s41/named.patch steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
B=./build-base/steadymoe
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
bench_run q - "${q[@]}"; BENCH_CLI=$B bench_run qbase - "${q[@]}"; unset BENCH_CLI
bench_run q2 - "${q[@]}"; BENCH_CLI=$B bench_run qbase2 - "${q[@]}"; unset BENCH_CLI
compare_named q qbase q2 qbase2
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
