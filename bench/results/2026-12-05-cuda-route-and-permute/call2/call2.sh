#!/usr/bin/env bash
# Call 2 (s42; commit in $1 plus waits.patch: every consumer and epilogue thread waits (bar.sync) at both
# hand-off barriers, the epilogue warps reading their next tile before `drained`): racecheck on the grouped
# GEMM's parked tests (SwiGLU, scatter) and the tiled-schedule test; the grouped GEMM and layer suites; qwen3
# bf16 and deepseek-v3 fp8 at 16384 tokens against build-base (waits.patch taken off), alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
for f in PersistentSwiGlus PersistentScatters EveryTiledSchedule.GivesTheExactResult/0; do
  timeout 100 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter="*$f*" \
    > $OUT/t/racecheck-${f%%.*}.log 2>&1; echo "racecheck $f: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck-${f%%.*}.log | tail -1) $(grep -c '^\[       OK' $OUT/t/racecheck-${f%%.*}.log) OK at $((SECONDS-start)) s"
done
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
build_base bench/tmp-call/s42/waits.patch steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=545
B=./build-base/steadymoe
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run q - "${q[@]}"; BENCH_CLI=$B bench_run qbase - "${q[@]}"; unset BENCH_CLI
bench_run v3 - "${v3[@]}"; BENCH_CLI=$B bench_run v3base - "${v3[@]}"; unset BENCH_CLI
BENCH_CLI=$B bench_run qbase2 - "${q[@]}"; unset BENCH_CLI; bench_run q2 - "${q[@]}"
BENCH_CLI=$B bench_run v3base2 - "${v3[@]}"; unset BENCH_CLI; bench_run v32 - "${v3[@]}"
compare_named q qbase qbase2 q2 v3 v3base v3base2 v32
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
