#!/usr/bin/env bash
# Call 2, branch next/shared-first at $1 (main + three changes, each with a switch that undoes it at run time):
#  - the shared expert forks before the router (STEADYMOE_SHARED_FIRST=0: after it, as on main);
#  - decode CTAs ask for their first stages' weights before waiting for the kernel before them
#    (STEADYMOE_EARLY_WEIGHTS=0: wait first);
#  - bench: an `experts µs` column (routed + shared experts alone, untimed) and `untimed/experts`.
# Also main's CLI (bench/tmp-call/s16/main.tar, built beside) for an A/B against main in the same call.
# Racecheck on the early-weights test with and without the switch, its reports counted per kernel, to tell new
# reports from the ones the stage protocol always draws.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/prev
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
tar -xf bench/tmp-call/s16/main.tar -C /tmp/prev
( cmake -S /tmp/prev -B /tmp/prev/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-prev.log 2>&1 &&
  cmake --build /tmp/prev/b --target steadymoe_cli -j 5 > $OUT/t/build-prev.log 2>&1; echo "main's CLI: rc=$?" > $OUT/t/built-prev.txt ) &
prev_pid=$!
cmake --build build-gpu -j 11 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core \
  > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB]
  echo "=== $1 ${2:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 >> $OUT/t/gpu-tests.log 2>&1; echo "$1 ${2:-}: rc=$?"
}
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_SHARED_FIRST=0
run_test test_cuda_layer STEADYMOE_EARLY_WEIGHTS=0
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_EARLY_WEIGHTS=0
run_test test_cuda_tensor_core
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 100 $san --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
  --gtest_filter='*WeightsAsked*' > $OUT/t/memcheck.log 2>&1
echo "memcheck of the new test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
for knob in STEADYMOE_UNSET=1 STEADYMOE_EARLY_WEIGHTS=0; do
  env $knob timeout 100 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm \
    --gtest_filter='*WeightsAsked*' > $OUT/t/racecheck-$knob.log 2>&1
  echo "racecheck of the new test ($knob): rc=$? $(grep -h 'RACECHECK SUMMARY' $OUT/t/racecheck-$knob.log | tail -1)"
  grep "Race reported" $OUT/t/racecheck-$knob.log | sed 's/(steadymoe::cuda::GroupedGemmLaunch.*//; s/.*unnamed>:://' | sort | uniq -c
done
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
wait $prev_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=530
main_cli=/tmp/prev/b/steadymoe
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,128)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8,128)
bench_run v4 - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main - "${v4[@]}"
bench_run v3 - "${v3[@]}"
BENCH_CLI=$main_cli bench_run v3-main - "${v3[@]}"
bench_run v4-late STEADYMOE_SHARED_FIRST=0 "${v4[@]}"
bench_run v3-late STEADYMOE_SHARED_FIRST=0 "${v3[@]}"
bench_run v4-wait STEADYMOE_EARLY_WEIGHTS=0 "${v4[@]}"
bench_run qwen3 - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
BENCH_CLI=$main_cli bench_run qwen3-main - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
bench_run v4-again - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main-again - "${v4[@]}"
runs=(); for n in v4 v4-main v4-late v4-wait v4-again v4-main-again v3 v3-main v3-late qwen3 qwen3-main; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
