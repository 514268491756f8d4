#!/usr/bin/env bash
# A one-token step's routing kernel publishes its experts before it ends and the routed gate/up GEMM's CTAs
# start their weights' copies from them (RouteLaunch::early, GroupedGemmLaunch::early_route), against
# STEADYMOE_EARLY_ROUTE=0 in the same build (built here and carried:
# `bash bench/carry_build.sh steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer test_cuda_routing`).
# Tests (the routing, grouped-GEMM, tensor-core and layer suites; the tensor-core suite with the switch off too),
# memcheck and racecheck on the new tests, then qwen3-30b-a3b bf16 at 1 and 8 tokens, on and off alternating,
# three rounds, and one traced one-token run each way.
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer test_cuda_routing || return 1
  run_test test_cuda_routing
  run_test test_cuda_grouped_gemm "" "*EarlyRouted*:*IndexedRows*:*FewRowCtas*"
  run_test test_cuda_tensor_core
  run_test test_cuda_tensor_core STEADYMOE_EARLY_ROUTE=0
  run_test test_cuda_layer
  memcheck test_cuda_routing "*Early*"
  memcheck test_cuda_grouped_gemm "*EarlyRouted*"
  local san
  san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  timeout 100 $san --tool racecheck build-gpu/tests/test_cuda_routing --gtest_filter="*Early*" > "$OUT/t/racecheck-routing.log" 2>&1
  echo "racecheck on test_cuda_routing *Early*: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' "$OUT/t/racecheck-routing.log" | tail -1)"
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BENCH_BUDGET_S:-400}
for r in 1 2 3; do
  again=$([[ $r == 1 ]] && echo "" || echo "-again$r")
  bench_run "on$again" - --workload qwen3-30b-a3b --format bf16 --tokens 1,8
  bench_run "off$again" STEADYMOE_EARLY_ROUTE=0 --workload qwen3-30b-a3b --format bf16 --tokens 1,8
done
bench_run "on-trace" - --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
bench_run "off-trace" STEADYMOE_EARLY_ROUTE=0 --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
compare_named on on-again2 on-again3 off off-again2 off-again3
grep -A14 "^kernels of one forward" "$OUT/t/on-trace.log" "$OUT/t/off-trace.log" 2>/dev/null | cut -c1-150
call_end
