#!/usr/bin/env bash
# Call 1, at $1 = c140998 (the previous session's final tree): carried (`bash bench/carry_build.sh steadymoe_cli
# test_cuda_grouped_gemm test_cuda_layer`), with the CLI built from the same tree plus stamps.patch (beside this
# script) packed as build-probe/stamped.tar.gz. Tests: test_cuda_grouped_gemm, test_cuda_layer. Then, where $2 is
# `readme`, the README's figures (bench/readme_figures.sh, into $OUT/readme); then one-token traces of qwen3-30b-a3b bf16 by both CLIs,
# the stamped one printing its routing and combine kernels' phase stamps (cycles, and the global timer's span)
# and the global timer at five points of the decode GEMMs' CTA 0 (launches 192-215: the router GEMM, gate/up
# and down of a few layer runs).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || return 1
  run_test test_cuda_grouped_gemm
  run_test test_cuda_layer
}
call_tests tests || exit 1
OUT_MAIN=$OUT
if [[ ${2:-} == readme ]]; then
  mkdir -p "$OUT/readme"
  OUT=$OUT/readme RUNS=2 BENCH_BUDGET_S=330 bash bench/readme_figures.sh "$1" > "$OUT/readme.txt" 2>&1
  tail -60 "$OUT/readme.txt"
fi
(cd build-probe && tar xzf stamped.tar.gz)
BENCH_BUDGET_S=540
for r in 1 2; do
  bench_run q1-plain-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
  BENCH_CLI=./build-probe/stamped/steadymoe bench_run q1-stamped-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
done
BENCH_CLI=./build-probe/stamped/steadymoe bench_run q4-stamped - --workload qwen3-30b-a3b --format bf16 --tokens 4 --trace
grep -h STAMPS "$OUT"/t/q*-stamped*.log | sort -k2,2 -s | head -80
for f in "$OUT"/t/q*.json; do python3 - "$f" <<'KERNELS'
import json, os, sys
for p in json.load(open(sys.argv[1]))["points"]:
    print(os.path.basename(sys.argv[1]), p["tokens"], "untimed", round(p.get("layer_untimed_us", 0), 1))
    for k in p.get("kernel_trace", []):
        print("   ", k["name"].split("(")[0][-40:], round(k["start_us"], 1), round(k["us"], 1))
KERNELS
done
call_end
