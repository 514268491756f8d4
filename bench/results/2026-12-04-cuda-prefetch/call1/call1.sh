#!/usr/bin/env bash
# Call 1 (session 24) at $1: L2 prefetches of the routed experts' weights (the routing kernel asks for the chosen
# experts' gate/up runs' first bytes, the gate/up CTAs for the down weights as they finish). Tests (grouped GEMM,
# routing, layer; memcheck on the routing and FP4 x e4m3 tests), then deepseek-v4-flash at 1 and 8 tokens: both
# prefetches / none / gate-up only / down only, alternating; qwen3 and deepseek-v3 at 1 token both / none.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_routing > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_grouped_gemm
run_test test_cuda_routing
run_test test_cuda_layer
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 60 $san --tool memcheck build-gpu/tests/test_cuda_routing > $OUT/t/memcheck-routing.log 2>&1
echo "memcheck on the routing test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck-routing.log | tail -1)"
timeout 80 $san --tool memcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4MeetingE4m3*' > $OUT/t/memcheck.log 2>&1
echo "memcheck on the FP4 x e4m3 test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=475
off="STEADYMOE_PREFETCH_GATE_UP_MB=0 STEADYMOE_PREFETCH_DOWN_MB=0"
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-off "$off" "${v4[@]}"
bench_run v4-gate-up STEADYMOE_PREFETCH_DOWN_MB=0 "${v4[@]}"; bench_run v4-down STEADYMOE_PREFETCH_GATE_UP_MB=0 "${v4[@]}"
bench_run v4-off-again "$off" "${v4[@]}"; bench_run v4-again - "${v4[@]}"
bench_run qwen3 - "${q3[@]}"; bench_run qwen3-off "$off" "${q3[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-off "$off" "${v3[@]}"
runs=(); for n in v4 v4-off v4-gate-up v4-down v4-again v4-off-again qwen3 qwen3-off v3 v3-off; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cat $OUT/compare.md | head -60
cd $OUT && tar czf t.tgz t && rm -rf t
