#!/usr/bin/env bash
# Call 3 (session 21) for branch next/combine-mask at $1: main + the combine's mask read before its dependent-launch
# wait. Main's CLI (bench/tmp-call/s21/main.tar, `git archive main`) built beside; the traces time the combine's
# end after the down GEMMs' ends.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/prev
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
tar -xf bench/tmp-call/s21/main.tar -C /tmp/prev
( cmake -S /tmp/prev -B /tmp/prev/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-prev.log 2>&1 &&
  cmake --build /tmp/prev/b --target steadymoe_cli -j 5 > $OUT/t/build-prev.log 2>&1; echo "main's CLI: rc=$?" > $OUT/t/built-prev.txt ) &
prev_pid=$!
cmake --build build-gpu -j 11 --target steadymoe_cli test_cuda_combine test_cuda_layer test_cuda_tensor_core > $OUT/t/build.log 2>&1 ||
  { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [FILTER]
  echo "=== $1 ${2:-}" >> $OUT/t/gpu-tests.log
  timeout 150 build-gpu/tests/$1 ${2:+--gtest_filter=$2} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_combine
run_test test_cuda_layer
run_test test_cuda_tensor_core '*Graph*:*Bitwise*:*Reversed*:*MatchesTheCpu*'
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 60 $san --tool memcheck build-gpu/tests/test_cuda_combine > $OUT/t/memcheck.log 2>&1
echo "memcheck on the combine test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
wait $prev_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=330
main_cli=/tmp/prev/b/steadymoe
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
bench_run qwen3 - "${q3[@]}"
BENCH_CLI=$main_cli bench_run qwen3-main - "${q3[@]}"
bench_run v4 - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main - "${v4[@]}"
bench_run qwen3-again - "${q3[@]}"
BENCH_CLI=$main_cli bench_run qwen3-main-again - "${q3[@]}"
bench_run v4-again - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main-again - "${v4[@]}"
bench_run v3 - "${v3[@]}"
BENCH_CLI=$main_cli bench_run v3-main - "${v3[@]}"
runs=(); for n in v4 v4-main v4-again v4-main-again v3 v3-main qwen3 qwen3-main qwen3-again qwen3-main-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
