#!/usr/bin/env bash
# Call 1, at $1 (the routing kernels' early loads, uncommitted on top of 592f6c1): the routing kernels read a
# token's mask, hash id and biases before their dependent-launch wait, the warp kernel loads split 0 of the
# logits with the others in one round (and its mask beside them), both form the slots' weights a lane a slot
# (slot_of_lane); the combine reads its tokens' mask before its wait. Carried (`bash bench/carry_build.sh
# steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_combine`), and 592f6c1's CLI in
# build-base-carry/base.tar.gz (`tar czf base.tar.gz steadymoe` in the carried build's folder before the
# change). Tests: test_cuda_routing, test_cuda_layer, test_cuda_combine; memcheck on the routing and combine
# suites, racecheck on the routing suite. Bench, new and base alternating twice: qwen3-30b-a3b bf16 at 1 and 8
# tokens, deepseek-v4-flash fp4 and deepseek-v3 fp8 at 1 token, with traces.
source bench/call_common.sh "$1"
( cd build-base-carry && tar xzf base.tar.gz )
tests() {
  build_gpu steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_combine || return 1
  run_test test_cuda_routing
  run_test test_cuda_layer
  run_test test_cuda_combine
  memcheck test_cuda_routing
  memcheck test_cuda_combine
  compute-sanitizer --tool racecheck build-gpu/tests/test_cuda_routing > "$OUT/t/racecheck-routing.log" 2>&1
  echo "racecheck routing rc=$?: $(grep -E 'RACECHECK SUMMARY|hazard' "$OUT/t/racecheck-routing.log" | tail -1)"
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BUDGET:-480}
B=./build-base-carry/steadymoe
for r in 1 2; do
  bench_run q-new-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  BENCH_CLI=$B bench_run q-base-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run v4-new-$r - --workload deepseek-v4-flash --format fp4 --tokens 1 --trace
  BENCH_CLI=$B bench_run v4-base-$r - --workload deepseek-v4-flash --format fp4 --tokens 1 --trace
  bench_run v3-new-$r - --workload deepseek-v3 --format fp8 --tokens 1 --trace
  BENCH_CLI=$B bench_run v3-base-$r - --workload deepseek-v3 --format fp8 --tokens 1 --trace
done
for f in "$OUT"/t/*.json; do python3 - "$f" <<'KERNELS'
import json, os, sys
for p in json.load(open(sys.argv[1]))["points"]:
    ks = [(k["name"].split("<")[0].split("(")[0], round(k["start_us"], 1), round(k["us"], 1))
          for k in p.get("kernel_trace", []) if "route" in k["name"] or "combine" in k["name"]]
    print(os.path.basename(sys.argv[1]), p["tokens"], "untimed", round(p.get("layer_untimed_us", 0), 1), ks)
KERNELS
done
call_end
