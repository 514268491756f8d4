#!/usr/bin/env bash
# Call 3, at $1: the scan-free one-token permutation in routing.cu's warp kernel only (route_wide.cu's keeps
# its scans unless STEADYMOE_WIDE_SCAN_FREE_PERMUTE=1) and the decode combine's eager rows; carried
# (`bash bench/carry_build.sh steadymoe_cli test_cuda_routing test_cuda_combine test_cuda_tensor_core`) with c140998's CLI as the base.
# Tests: the routing suite both ways and the combine suite, memcheck on the routing suite with the switch.
# Also the shared expert's weights asked of the L2 cache as it forks (STEADYMOE_SHARED_PREFETCH=gate_up|both):
# test_cuda_tensor_core with it (and memcheck). Bench at 1 and 8 tokens: qwen3-30b-a3b, deepseek-v3 and
# deepseek-v4-flash, new and base alternating two times; in each round the two with a shared expert also with
# route_wide.cu's kernel scan-free (the switch) and with each prefetch.
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_routing test_cuda_combine test_cuda_tensor_core || return 1
  run_test test_cuda_routing
  run_test test_cuda_routing STEADYMOE_WIDE_SCAN_FREE_PERMUTE=1
  run_test test_cuda_combine
  STEADYMOE_WIDE_SCAN_FREE_PERMUTE=1 memcheck test_cuda_routing
  run_test test_cuda_tensor_core STEADYMOE_SHARED_PREFETCH=both
  STEADYMOE_SHARED_PREFETCH=both memcheck test_cuda_tensor_core
}
call_tests tests || exit 1
tar xJf build-base-carry/base.tar.xz
B=./build-base-carry/steadymoe
BENCH_BUDGET_S=300
for r in 1 2; do
  for w in "q qwen3-30b-a3b bf16" "v3 deepseek-v3 fp8" "v4 deepseek-v4-flash fp4"; do
    read -r name workload format <<< "$w"
    bench_run $name-new-$r - --workload $workload --format $format --tokens 1,8
    BENCH_CLI=$B bench_run $name-base-$r - --workload $workload --format $format --tokens 1,8
    [[ $name == q ]] && continue
    bench_run $name-free-$r STEADYMOE_WIDE_SCAN_FREE_PERMUTE=1 --workload $workload --format $format --tokens 1,8
    bench_run $name-pfg-$r STEADYMOE_SHARED_PREFETCH=gate_up --workload $workload --format $format --tokens 1,8
    bench_run $name-pfb-$r STEADYMOE_SHARED_PREFETCH=both --workload $workload --format $format --tokens 1,8
  done
done
python3 - "$OUT"/t/*.json <<'AB'
import json, re, statistics, sys
rows = {}
for f in sys.argv[1:]:
    m = re.match(r".*/(q|v3|v4)-(new|base|free|pfg|pfb)-\d\.json$", f)
    if not m: continue
    for p in json.load(open(f))["points"]:
        r = rows.setdefault((m[1], p["tokens"], m[2]), {"untimed": [], "experts": [], "routed": []})
        r["untimed"].append(p["layer_untimed_us"]); r["experts"].append(p["experts_untimed_us"])
        r["routed"].append(p["routed_us"])
for (w, t, v), r in sorted(rows.items()):
    print(w, t, v, " ".join(f"{k} {statistics.median(x):.1f} [{min(x):.1f}-{max(x):.1f}]" for k, x in r.items()))
AB
call_end
