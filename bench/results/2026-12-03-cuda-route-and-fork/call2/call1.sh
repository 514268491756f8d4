#!/usr/bin/env bash
# Call 1 for branch next/route-fork at $1 (main + two changes, each with a switch that undoes it):
#  - the routing kernel's staged form (STEADYMOE_ROUTE_KERNEL=unrolled: the old, unrolled form);
#  - the shared expert's fork point (STEADYMOE_SHARED_FORK=logits: after the router's GEMM; =start: before it;
#    default: after the routing, as main).
# Also ncu's warp stall reasons for each kernel of a one-token decode step (deepseek-v4-flash, qwen3), with the
# caches flushed before each kernel (as in a model, where the weights streamed since push code and data out of
# L2) and, for qwen3, not flushed: whether the small kernels wait on their code (no_instruction).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
here=bench/tmp-call/s19
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
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_SHARED_FORK=logits
run_test test_cuda_layer STEADYMOE_SHARED_FORK=start 'CudaDemoLayer.*'
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
ncu_run() {  # ncu_run NAME CACHE ARGS...
  local name=$1 cache=$2; shift 2
  timeout 100 ncu --clock-control none --cache-control $cache --graph-profiling node --kernel-name-base demangled \
    -k regex:'route_kernel|permute_small|shared_kernel|gather_kernel|decode_kernel|combine_kernel' \
    --launch-skip 150 --launch-count 13 --section SpeedOfLight --section WarpStateStats --page raw --csv \
    build-gpu/steadymoe bench --backend cuda "$@" --repeat 1 --json /tmp/$name.json > $OUT/t/$name.csv 2> $OUT/t/$name.err
  echo "--- $name (cache-control $cache): rc=$?"
  python3 $here/ncu_summary.py $OUT/t/$name.csv 2>&1 | head -20
}
ncu_run ncu-qwen3-flushed all --workload qwen3-30b-a3b --format bf16 --tokens 1
ncu_run ncu-qwen3-warm none --workload qwen3-30b-a3b --format bf16 --tokens 1
ncu_run ncu-v4-flushed all --workload deepseek-v4-flash --format fp4 --tokens 1
echo "ncu done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
bench_run qwen3 - "${q3[@]}"
bench_run qwen3-unrolled STEADYMOE_ROUTE_KERNEL=unrolled "${q3[@]}"
bench_run v4 - "${v4[@]}"
bench_run v4-unrolled STEADYMOE_ROUTE_KERNEL=unrolled "${v4[@]}"
bench_run v4-fork-logits STEADYMOE_SHARED_FORK=logits "${v4[@]}"
bench_run v3 - "${v3[@]}"
bench_run v3-unrolled STEADYMOE_ROUTE_KERNEL=unrolled "${v3[@]}"
bench_run v4-fork-start STEADYMOE_SHARED_FORK=start "${v4[@]}"
bench_run v3-fork-logits STEADYMOE_SHARED_FORK=logits "${v3[@]}"
bench_run qwen3-again - "${q3[@]}"
runs=(); for n in v4 v4-unrolled v4-fork-logits v4-fork-start v3 v3-unrolled v3-fork-logits qwen3 qwen3-unrolled qwen3-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
