#!/usr/bin/env bash
# Call 1's work trimmed to the little device time left after failed starts, at $1 = c73fe78: carried as call 1
# (`bash bench/carry_build.sh steadymoe_cli test_cuda_routing test_cuda_combine test_cuda_tensor_core`, c140998's
# CLI in build-base-carry/base.tar.xz). Tests: those three suites; memcheck and initcheck on the routing and
# combine suites. Bench, new and base alternating twice: qwen3-30b-a3b bf16 and deepseek-v4-flash fp4 at 1 and 8
# tokens with traces (deepseek-v3's one token takes the same block kernel as deepseek-v4-flash's).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_routing test_cuda_combine test_cuda_tensor_core || return 1
  run_test test_cuda_routing
  run_test test_cuda_combine
  run_test test_cuda_tensor_core
  memcheck test_cuda_routing
  memcheck test_cuda_combine
  for t in routing combine; do
    compute-sanitizer --tool initcheck build-gpu/tests/test_cuda_$t > "$OUT/t/initcheck-$t.log" 2>&1
    echo "initcheck $t rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/t/initcheck-$t.log" | tail -1)"
  done
}
call_tests tests || exit 1
tar xJf build-base-carry/base.tar.xz
B=./build-base-carry/steadymoe
BENCH_BUDGET_S=${BUDGET:-230}
for r in 1 2; do
  bench_run q-new-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  BENCH_CLI=$B bench_run q-base-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run v4-new-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace
  BENCH_CLI=$B bench_run v4-base-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace
done
for f in "$OUT"/t/*-1.json; do python3 - "$f" <<'KERNELS'
import json, os, sys
for p in json.load(open(sys.argv[1]))["points"]:
    ks = [(k["name"].split("(")[0].split("::")[-1][:28], round(k["start_us"], 1), round(k["us"], 1))
          for k in p.get("kernel_trace", []) if "route" in k["name"] or "combine" in k["name"]]
    print(os.path.basename(sys.argv[1]), p["tokens"], "untimed", round(p.get("layer_untimed_us", 0), 1),
          "experts", round(p.get("experts_untimed_us", 0), 1), ks)
KERNELS
done
call_end
