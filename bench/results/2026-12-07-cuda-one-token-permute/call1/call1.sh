#!/usr/bin/env bash
# Call 1, at $1 = 9c9b19e (one token's pairs permuted without the block's scans; decode combines loading a
# token's rows beside its mask): carried (`bash bench/carry_build.sh steadymoe_cli test_cuda_routing
# test_cuda_combine test_cuda_tensor_core`), with c140998's CLI (build-base-carry/base.tar.xz). Tests: those
# three suites; memcheck and initcheck on the routing and combine suites, racecheck on the routing suite.
# Bench, new and base alternating twice: qwen3-30b-a3b bf16, deepseek-v3 fp8 and deepseek-v4-flash fp4 at 1
# and 8 tokens with traces. Then, where $2 is `readme`, time is left and the GPU is an H200, the README's
# figures by the new CLI (bench/readme_figures.sh, one round).
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
  compute-sanitizer --tool racecheck build-gpu/tests/test_cuda_routing > "$OUT/t/racecheck-routing.log" 2>&1
  echo "racecheck routing rc=$?: $(grep -E 'RACECHECK SUMMARY' "$OUT/t/racecheck-routing.log" | tail -1)"
}
call_tests tests || exit 1
tar xJf build-base-carry/base.tar.xz
B=./build-base-carry/steadymoe
BENCH_BUDGET_S=330
for r in 1 2; do
  bench_run q-new-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  BENCH_CLI=$B bench_run q-base-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run v3-new-$r - --workload deepseek-v3 --format fp8 --tokens 1,8 --trace
  BENCH_CLI=$B bench_run v3-base-$r - --workload deepseek-v3 --format fp8 --tokens 1,8 --trace
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
if [[ ${2:-} == readme ]] && (( SECONDS - start < 330 )) && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$OUT/readme"
  OUT=$OUT/readme RUNS=1 BENCH_BUDGET_S=$((560 - (SECONDS - start))) bash bench/readme_figures.sh "$1" > "$OUT/readme.txt" 2>&1
  tail -40 "$OUT/readme.txt"
fi
call_end
