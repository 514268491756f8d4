#!/usr/bin/env bash
# Call 3 (session 25) at $1 (next/route-select): the block-per-token routing kernel selecting each warp's top K
# first, then warp 0's top K of those, and group limits of 32 experts by a warp's reductions
# (STEADYMOE_ROUTE_SELECT=steps: main's K block-wide steps). Routing test (both selections against the warp
# kernel, bit for bit), memcheck and racecheck on it, layer and tensor-core tests; deepseek-v4-flash at 1 and 8
# tokens and deepseek-v3 at 1, default / steps alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_tensor_core > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
source bench/device_tests.sh
run_test test_cuda_routing
run_test test_cuda_layer
run_test test_cuda_tensor_core '' '*Routing*:*Graph*:*Bitwise*:*Invarian*'
memcheck test_cuda_routing
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 100 $san --tool racecheck build-gpu/tests/test_cuda_routing > $OUT/t/racecheck-routing.log 2>&1
echo "racecheck on test_cuda_routing: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck-routing.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|SKIPPED" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=400
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-steps STEADYMOE_ROUTE_SELECT=steps "${v4[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-steps STEADYMOE_ROUTE_SELECT=steps "${v3[@]}"
bench_run v4-steps-again STEADYMOE_ROUTE_SELECT=steps "${v4[@]}"; bench_run v4-again - "${v4[@]}"
runs=(); for n in v4 v4-steps v4-again v4-steps-again v3 v3-steps; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
head -12 $OUT/compare.md
grep -E "^\| (kernel|route|permute|span)" $OUT/traces.md | head -20
cd $OUT && tar czf t.tgz t && rm -rf t
