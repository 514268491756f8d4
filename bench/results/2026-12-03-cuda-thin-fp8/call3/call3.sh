#!/usr/bin/env bash
# Call 3 (session 22) for branch next/route-quantises at $1: the block-per-token routing kernel quantises the
# tokens for the routed experts' gate/up in passing. Switch: STEADYMOE_ROUTE_QUANTISES=0 ("gather": the gather
# kernel after the permutation, as main; the same bits).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_routing test_cuda_tensor_core \
  test_cuda_layer > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_routing
run_test test_cuda_layer
run_test test_cuda_tensor_core
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 60 $san --tool memcheck build-gpu/tests/test_cuda_routing > $OUT/t/memcheck.log 2>&1
echo "memcheck on the routing test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
timeout 60 $san --tool racecheck build-gpu/tests/test_cuda_routing --gtest_filter='*Quantises*' > $OUT/t/racecheck.log 2>&1
echo "racecheck on the quantising test: rc=$? $(grep -h 'RACECHECK SUMMARY' $OUT/t/racecheck.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=320
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"
bench_run v4-gather STEADYMOE_ROUTE_QUANTISES=0 "${v4[@]}"
bench_run v3 - "${v3[@]}"
bench_run v3-gather STEADYMOE_ROUTE_QUANTISES=0 "${v3[@]}"
bench_run v4-gather-again STEADYMOE_ROUTE_QUANTISES=0 "${v4[@]}"
bench_run v4-again - "${v4[@]}"
runs=(); for n in v4 v4-gather v4-again v4-gather-again v3 v3-gather; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
