#!/usr/bin/env bash
# One token's experts ranked by the block (rank.patch) and decode combines in blocks of 64 threads
# (combine-threads.patch), both applied at $1, carried (`bash bench/carry_build.sh steadymoe_cli test_cuda_routing
# test_cuda_combine test_cuda_tensor_core test_cuda_layer`). Each has its switch, so one build compares both ways:
# STEADYMOE_ONE_TOKEN_RANK=0 (the warp's rounds), STEADYMOE_DECODE_COMBINE_THREADS=256 (blocks of 256).
# Tests: the routing suite both ways, the combine suite both ways, the tensor-core and layer suites (the layer's
# with test_cuda_layer's new masked first decode batch, not yet run on a GPU, and initcheck on it); memcheck,
# racecheck and initcheck on the routing suite, memcheck on the combine suite. Bench at 1 and 8 tokens with traces, three
# rounds: qwen3-30b-a3b bf16 as built, with the rounds and with blocks of 256; deepseek-v3 fp8 and
# deepseek-v4-flash fp4 as built and with blocks of 256 (their one-token routing is route_wide.cu's, unchanged).
# Also the router GEMM in smaller k blocks (STEADYMOE_ROUTER_K_CHUNK=256, and =128 for qwen3): more CTAs a decode step.
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_routing test_cuda_combine test_cuda_tensor_core test_cuda_layer || return 1
  run_test test_cuda_routing
  run_test test_cuda_routing STEADYMOE_ONE_TOKEN_RANK=0
  run_test test_cuda_combine
  run_test test_cuda_combine STEADYMOE_DECODE_COMBINE_THREADS=256
  run_test test_cuda_tensor_core
  run_test test_cuda_layer
  compute-sanitizer --tool initcheck build-gpu/tests/test_cuda_layer --gtest_filter='*Decode*' > "$OUT/t/initcheck-layer.log" 2>&1
  echo "initcheck layer decode rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/t/initcheck-layer.log" | tail -1)"
  memcheck test_cuda_routing
  memcheck test_cuda_combine
  for tool in racecheck initcheck; do
    compute-sanitizer --tool $tool build-gpu/tests/test_cuda_routing > "$OUT/t/$tool-routing.log" 2>&1
    echo "$tool routing rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/t/$tool-routing.log" | tail -1)"
  done
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BENCH_BUDGET_S:-400}
names=()
for r in 1 2 3; do
  again=$([[ $r == 1 ]] || echo "-again$r")  # compare_runs.py folds the later rounds in as medians
  bench_run q-new$again - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run q-rounds$again STEADYMOE_ONE_TOKEN_RANK=0 --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run q-c256$again STEADYMOE_DECODE_COMBINE_THREADS=256 --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run q-k256$again STEADYMOE_ROUTER_K_CHUNK=256 --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run q-k128$again STEADYMOE_ROUTER_K_CHUNK=128 --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  names+=(q-new$again q-rounds$again q-c256$again q-k256$again q-k128$again)
  for w in v3 v4; do
    [[ $w == v3 ]] && set_workload="--workload deepseek-v3 --format fp8" || set_workload="--workload deepseek-v4-flash --format fp4"
    bench_run $w-new$again - $set_workload --tokens 1,8 --trace
    bench_run $w-c256$again STEADYMOE_DECODE_COMBINE_THREADS=256 $set_workload --tokens 1,8 --trace
    bench_run $w-k256$again STEADYMOE_ROUTER_K_CHUNK=256 $set_workload --tokens 1,8 --trace
    names+=($w-new$again $w-c256$again $w-k256$again)
  done
done
compare_named "${names[@]}"
traces=()
for n in q-new q-rounds q-c256 q-k256 q-k128 v3-new v3-c256 v3-k256 v4-new v4-c256 v4-k256; do [[ -f $OUT/t/$n.json ]] && traces+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_traces.py "${traces[@]}" > "$OUT/traces.md" 2>&1 && grep -E "^#|route|combine" "$OUT/traces.md"
call_end
