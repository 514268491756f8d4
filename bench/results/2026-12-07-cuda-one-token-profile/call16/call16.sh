#!/usr/bin/env bash
# Call 16 (prepared in the sixtieth session, run in the sixty-first as `bash .../call16/call16.sh
# 5bd8d30+route-prefetch.patch`): a decode step's routing asks L2 for the routed gate/up GEMM's first
# weights of each chosen expert (route-prefetch.patch: WeightPrefetch in routing.hpp, 128 KiB a 128-feature
# region, or a 64-feature run in e4m3 order), where in the one-token traces DRAM idles from the routing's
# choice to the gate/up's first copies (bench/results/2026-12-07-cuda-one-token-profile.md: qwen3's gate/up
# starts streaming about 10 µs into a 41.5 µs layer). At $1 = a tree with `git apply
# bench/results/2026-12-07-cuda-one-token-profile/next-call/route-prefetch.patch`, carried:
# `bash bench/carry_build.sh steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_tensor_core`.
# One build, STEADYMOE_ROUTE_PREFETCH_KB=0 the control (the same bits). Tests: the three suites, memcheck on the
# routing and layer suites (the prefetches' addresses). Bench, the two ways alternating twice, with traces:
# qwen3-30b-a3b bf16, deepseek-v4-flash fp4 and deepseek-v3 fp8 at 1 and 8 tokens. Keep it where the layer
# (untimed) is faster with the same digests; try other sizes (STEADYMOE_ROUTE_PREFETCH_KB) if it is.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_routing
run_test test_cuda_layer
run_test test_cuda_tensor_core
memcheck test_cuda_routing
memcheck test_cuda_layer
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-420}
for r in 1 2; do
  for wl in qwen3-30b-a3b:bf16 deepseek-v4-flash:fp4 deepseek-v3:fp8; do
    w=(--workload ${wl%%:*} --format ${wl#*:} --tokens 1,8 --trace)
    n=${wl%%:*}; n=${n#deepseek-}
    bench_run $n-prefetch-$r - "${w[@]}"
    bench_run $n-none-$r STEADYMOE_ROUTE_PREFETCH_KB=0 "${w[@]}"
  done
done
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
