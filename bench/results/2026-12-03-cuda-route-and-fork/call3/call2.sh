#!/usr/bin/env bash
# Call 2 for branch next/route-fork at $1: routing for decode steps by a block per token
# (STEADYMOE_ROUTE_KERNEL=unrolled: the warp per token of main), and the shared expert forked after the router's
# GEMM by default (STEADYMOE_SHARED_FORK=routing: after the routing, as main).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_routing test_cuda_tensor_core test_cuda_layer \
  > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_routing
run_test test_cuda_tensor_core - 'CudaRouting.*:CudaTensorCore.IsBitwise*:CudaTensorCore.Graph*'
run_test test_cuda_layer
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  timeout 60 $san --tool $tool build-gpu/tests/test_cuda_routing > $OUT/t/$tool.log 2>&1
  echo "$tool on the routing test: rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=290
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
bench_run qwen3 - "${q3[@]}"
bench_run qwen3-unrolled STEADYMOE_ROUTE_KERNEL=unrolled "${q3[@]}"
bench_run v4 - "${v4[@]}"
bench_run v4-unrolled STEADYMOE_ROUTE_KERNEL=unrolled "${v4[@]}"
bench_run v3 - "${v3[@]}"
bench_run v3-unrolled STEADYMOE_ROUTE_KERNEL=unrolled "${v3[@]}"
bench_run v4-fork-routing STEADYMOE_SHARED_FORK=routing "${v4[@]}"
bench_run qwen3-again - "${q3[@]}"
runs=(); for n in v4 v4-unrolled v4-fork-routing v3 v3-unrolled qwen3 qwen3-unrolled qwen3-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
