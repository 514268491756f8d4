#!/usr/bin/env bash
# One token's experts ranked by the block (rank.patch) and decode combines in blocks of 64 threads
# (combine-threads.patch), both applied at $1, carried (`bash bench/carry_build.sh steadymoe_cli test_cuda_routing
# test_cuda_combine test_cuda_tensor_core`). Each has its switch, so one build compares both ways:
# STEADYMOE_ONE_TOKEN_RANK=0 (the warp's rounds), STEADYMOE_DECODE_COMBINE_THREADS=256 (blocks of 256).
# Tests: the routing suite both ways, the combine suite both ways, the tensor-core suite; memcheck, racecheck
# and initcheck on the routing suite, memcheck on the combine suite. Bench at 1 and 8 tokens with traces, three
# rounds: qwen3-30b-a3b bf16 as built, with the rounds and with blocks of 256; deepseek-v3 fp8 and
# deepseek-v4-flash fp4 as built and with blocks of 256 (their one-token routing is route_wide.cu's, unchanged).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_routing test_cuda_combine test_cuda_tensor_core || return 1
  run_test test_cuda_routing
  run_test test_cuda_routing STEADYMOE_ONE_TOKEN_RANK=0
  run_test test_cuda_combine
  run_test test_cuda_combine STEADYMOE_DECODE_COMBINE_THREADS=256
  run_test test_cuda_tensor_core
  memcheck test_cuda_routing
  memcheck test_cuda_combine
  for tool in racecheck initcheck; do
    compute-sanitizer --tool $tool build-gpu/tests/test_cuda_routing > "$OUT/t/$tool-routing.log" 2>&1
    echo "$tool routing rc=$?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/t/$tool-routing.log" | tail -1)"
  done
}
call_tests tests || exit 1
BENCH_BUDGET_S=300
for r in 1 2 3; do
  bench_run q-new-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run q-rounds-$r STEADYMOE_ONE_TOKEN_RANK=0 --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  bench_run q-c256-$r STEADYMOE_DECODE_COMBINE_THREADS=256 --workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace
  for w in "v3 deepseek-v3 fp8" "v4 deepseek-v4-flash fp4"; do
    read -r name workload format <<< "$w"
    bench_run $name-new-$r - --workload $workload --format $format --tokens 1,8 --trace
    bench_run $name-c256-$r STEADYMOE_DECODE_COMBINE_THREADS=256 --workload $workload --format $format --tokens 1,8 --trace
  done
done
python3 - "$OUT"/t/*.json <<'AB'
import json, re, statistics, sys
rows = {}
for f in sys.argv[1:]:
    m = re.match(r".*/(q|v3|v4)-(new|rounds|c256)-\d\.json$", f)
    if not m: continue
    for p in json.load(open(f))["points"]:
        r = rows.setdefault((m[1], p["tokens"], m[2]), {"untimed": [], "experts": [], "route": [], "combine": []})
        r["untimed"].append(p["layer_untimed_us"]); r["experts"].append(p["experts_untimed_us"])
        for k in p.get("kernel_trace", []):
            if "route" in k["name"]: r["route"].append(k["us"])
            if "combine_kernel" in k["name"]: r["combine"].append(k["us"])
for (w, t, v), r in sorted(rows.items()):
    print(w, t, v, " ".join(f"{k} {statistics.median(x):.2f} [{min(x):.2f}-{max(x):.2f}]" for k, x in r.items() if x))
AB
call_end
