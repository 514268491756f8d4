#!/usr/bin/env bash
# Call 2, at $1 (one token's scan-free permutation and the decode combine's eager rows), carried as call 1 with
# c140998's CLI as the base. Call 1 (an H100) put the routing kernel 0.9-1.1 µs shorter in every workload and
# qwen3's one-token layer 1.2 µs shorter, but deepseek-v3's and deepseek-v4-flash's one-token layers 1-2 µs
# longer in two alternations each: here four alternations at one token, without traces, to tell that from the
# noise of their two streams. Then, on an H200 with time left, the README's figures (bench/readme_figures.sh,
# two rounds).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli || return 1
}
call_tests tests || exit 1
tar xJf build-base-carry/base.tar.xz
B=./build-base-carry/steadymoe
BENCH_BUDGET_S=200
for r in 1 2 3 4; do
  for w in "q qwen3-30b-a3b bf16" "v3 deepseek-v3 fp8" "v4 deepseek-v4-flash fp4"; do
    read -r name workload format <<< "$w"
    bench_run $name-new-$r - --workload $workload --format $format --tokens 1
    BENCH_CLI=$B bench_run $name-base-$r - --workload $workload --format $format --tokens 1
  done
done
python3 - "$OUT"/t/*.json <<'AB'
import json, re, statistics, sys
rows = {}
for f in sys.argv[1:]:
    m = re.match(r".*/(q|v3|v4)-(new|base)-\d\.json$", f)
    if not m: continue
    for p in json.load(open(f))["points"]:
        r = rows.setdefault((m[1], m[2]), {"untimed": [], "experts": [], "routed": [], "shared": []})
        r["untimed"].append(p["layer_untimed_us"]); r["experts"].append(p["experts_untimed_us"])
        r["routed"].append(p["routed_us"]); r["shared"].append(p["shared_us"])
for (w, v), r in sorted(rows.items()):
    print(w, v, " ".join(f"{k} {statistics.median(x):.1f} [{min(x):.1f}-{max(x):.1f}]" for k, x in r.items()))
AB
if (( SECONDS - start < 300 )) && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$OUT/readme"
  OUT=$OUT/readme RUNS=2 BENCH_BUDGET_S=$((560 - (SECONDS - start))) bash bench/readme_figures.sh "$1" > "$OUT/readme.txt" 2>&1
  tail -45 "$OUT/readme.txt"
fi
call_end
