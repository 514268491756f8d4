#!/usr/bin/env bash
# Call 2 (session 21) for branch next/decode-chain at $1: call 1's fused permutation was slower (the routing
# kernel 5 µs longer); now each thread of the routing kernel reads at most K slot codes, and the early source
# quantisation is gone. Switches: STEADYMOE_FUSED_PERMUTE=0 (the permutation kernel), STEADYMOE_ROUTE_NEXT=end
# (the kernel after the routing starts only as it ends). Main's CLI built beside (bench/tmp-call/s21/main.tar).
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
cmake --build build-gpu -j 11 --target steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_tensor_core \
  test_cuda_layer > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_routing
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_FUSED_PERMUTE=0
run_test test_cuda_layer STEADYMOE_ROUTE_NEXT=end
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  timeout 90 $san --tool $tool build-gpu/tests/test_cuda_routing > $OUT/t/$tool.log 2>&1
  echo "$tool on the routing test: rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
wait $prev_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
main_cli=/tmp/prev/b/steadymoe
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main - "${v4[@]}"
bench_run qwen3 - "${q3[@]}"
BENCH_CLI=$main_cli bench_run qwen3-main - "${q3[@]}"
bench_run v3 - "${v3[@]}"
BENCH_CLI=$main_cli bench_run v3-main - "${v3[@]}"
bench_run v4-unfused STEADYMOE_FUSED_PERMUTE=0 "${v4[@]}"
bench_run qwen3-unfused STEADYMOE_FUSED_PERMUTE=0 "${q3[@]}"
bench_run v4-next-end STEADYMOE_ROUTE_NEXT=end "${v4[@]}"
bench_run qwen3-next-end STEADYMOE_ROUTE_NEXT=end "${q3[@]}"
bench_run v4-again - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main-again - "${v4[@]}"
bench_run qwen3-again - "${q3[@]}"
BENCH_CLI=$main_cli bench_run qwen3-main-again - "${q3[@]}"
bench_run v3-unfused STEADYMOE_FUSED_PERMUTE=0 "${v3[@]}"
runs=(); for n in v4 v4-main v4-unfused v4-next-end v4-again v4-main-again v3 v3-main v3-unfused qwen3 qwen3-main qwen3-unfused qwen3-next-end qwen3-again qwen3-main-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
