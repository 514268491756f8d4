#!/usr/bin/env bash
# Call 1, at $1 = the tree with the down GEMM's combine (uncommitted when built; the label names it): carried
# (`bash bench/carry_build.sh steadymoe_cli test_cuda_tensor_core test_cuda_grouped_gemm`), with c140998's CLI
# (build-base-carry/base.tar.xz) and c140998's CLI plus the stamps patch of
# bench/results/2026-12-07-cuda-one-token-stamps/call1/stamps.patch (build-probe/stamped.tar.xz).
# Tests: test_cuda_tensor_core (its new test: layers without a shared expert combining in the down GEMM),
# test_cuda_grouped_gemm; memcheck on the new test. Bench, new and base alternating twice: qwen3-30b-a3b bf16 at
# 1, 8, 128, 256 tokens with traces; deepseek-v3 fp8 and deepseek-v4-flash fp4 at 1, 8, 128 (their shared
# experts keep the combine kernel: the decode kernels' other changes). Then the stamped CLI at one qwen3 token;
# then, where $2 is `readme`, time is left and the GPU is an H200, the README's figures by the new CLI (bench/readme_figures.sh).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_tensor_core test_cuda_grouped_gemm || return 1
  run_test test_cuda_tensor_core
  run_test test_cuda_grouped_gemm
  memcheck test_cuda_tensor_core '*Combines*'
}
call_tests tests || exit 1
tar xJf build-base-carry/base.tar.xz
(cd build-probe && tar xJf stamped.tar.xz)
B=./build-base-carry/steadymoe
BENCH_BUDGET_S=420
for r in 1 2; do
  bench_run q-new-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256 --trace
  BENCH_CLI=$B bench_run q-base-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256 --trace
  bench_run v3-new-$r - --workload deepseek-v3 --format fp8 --tokens 1,8,128
  BENCH_CLI=$B bench_run v3-base-$r - --workload deepseek-v3 --format fp8 --tokens 1,8,128
  bench_run v4-new-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
  BENCH_CLI=$B bench_run v4-base-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
done
BENCH_CLI=./build-probe/stamped/steadymoe bench_run q1-stamped - --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
grep -h STAMPS "$OUT"/t/q1-stamped.log | head -60
for f in "$OUT"/t/q-*-1.json "$OUT"/t/q1-stamped.json; do python3 - "$f" <<'KERNELS'
import json, os, sys
for p in json.load(open(sys.argv[1]))["points"]:
    if p["tokens"] > 8: continue
    print(os.path.basename(sys.argv[1]), p["tokens"], "untimed", round(p.get("layer_untimed_us", 0), 1),
          "experts", round(p.get("experts_untimed_us", 0), 1))
    for k in p.get("kernel_trace", []):
        print("   ", k["name"].split("(")[0][-40:], round(k["start_us"], 1), round(k["us"], 1))
KERNELS
done
if [[ ${2:-} == readme ]] && (( SECONDS - start < 380 )) && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$OUT/readme"
  OUT=$OUT/readme RUNS=1 BENCH_BUDGET_S=$((560 - (SECONDS - start))) bash bench/readme_figures.sh "$1" > "$OUT/readme.txt" 2>&1
  tail -40 "$OUT/readme.txt"
fi
call_end
