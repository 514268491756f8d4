#!/usr/bin/env bash
# One token's experts ranked by the block (rank.patch, applied at $1), carried (`bash bench/carry_build.sh
# steadymoe_cli test_cuda_routing test_cuda_tensor_core`). Tests: the routing suite with the ranking and with
# STEADYMOE_ONE_TOKEN_RANK=0 (the warp's rounds), the tensor-core suite; memcheck, racecheck and initcheck on the
# routing suite. Bench: qwen3-30b-a3b bf16 at 1 token with traces, the ranking against the warp's rounds in the
# same build, alternating four times (the other workloads' one-token routing is route_wide.cu's, unchanged).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_routing test_cuda_tensor_core || return 1
  run_test test_cuda_routing
  run_test test_cuda_routing STEADYMOE_ONE_TOKEN_RANK=0
  run_test test_cuda_tensor_core
  memcheck test_cuda_routing
  for tool in racecheck initcheck; do
    compute-sanitizer --tool $tool build-gpu/tests/test_cuda_routing > "$OUT/t/$tool-routing.log" 2>&1
    echo "$tool routing rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/t/$tool-routing.log" | tail -1)"
  done
}
call_tests tests || exit 1
BENCH_BUDGET_S=200
for r in 1 2 3 4; do
  bench_run q-rank-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
  bench_run q-rounds-$r STEADYMOE_ONE_TOKEN_RANK=0 --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
done
python3 - "$OUT"/t/*.json <<'AB'
import json, re, statistics, sys
rows = {}
for f in sys.argv[1:]:
    m = re.match(r".*/q-(rank|rounds)-\d\.json$", f)
    if not m: continue
    for p in json.load(open(f))["points"]:
        r = rows.setdefault(m[1], {"untimed": [], "experts": [], "route kernel": []})
        r["untimed"].append(p["layer_untimed_us"]); r["experts"].append(p["experts_untimed_us"])
        r["route kernel"] += [k["us"] for k in p.get("kernel_trace", []) if "route_and_permute" in k["name"]]
for v, r in sorted(rows.items()):
    print(v, " ".join(f"{k} {statistics.median(x):.2f} [{min(x):.2f}-{max(x):.2f}]" for k, x in r.items() if x))
AB
call_end
