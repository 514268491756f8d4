#!/usr/bin/env bash
# Call 2, at $1 = the commit after b0d72d9 (the reads after the wait again; kept: the warp kernel's one round
# of logit loads, the slots' weights a lane a slot; then up to 32 pairs permuted by one warp, permute_by_warp),
# $2 = tests, bench or both (`all`: tests, then bench). Carried (`bash bench/carry_build.sh steadymoe_cli
# test_cuda_routing test_cuda_layer test_cuda_tensor_core` for `tests`; for `bench`, a pack of the CLI alone,
# with 592f6c1's CLI in build-base-carry/base.tar.gz: the tree, the goldens and both are more than a call
# carries; for `all`, `bash bench/carry_build.sh steadymoe_cli test_cuda_routing test_cuda_layer` with the
# base). tests: test_cuda_routing, test_cuda_layer, test_cuda_tensor_core (those carried); memcheck and
# racecheck on the routing suite. bench, new and base alternating twice: qwen3-30b-a3b bf16 at 1 and 8 tokens, deepseek-v4-flash
# fp4 and deepseek-v3 fp8 at 1 token, with traces; deepseek-v4-flash fp4 at 16384 tokens once each way, with
# traces (the warp-per-token routing kernel of 256 experts).
source bench/call_common.sh "$1"
suites=(test_cuda_routing test_cuda_layer)
[[ $2 == tests ]] && suites+=(test_cuda_tensor_core)
if [[ $2 != bench ]]; then
  tests() {
    build_gpu steadymoe_cli "${suites[@]}" || return 1
    for t in "${suites[@]}"; do run_test $t; done
    memcheck test_cuda_routing
    compute-sanitizer --tool racecheck build-gpu/tests/test_cuda_routing > "$OUT/t/racecheck-routing.log" 2>&1
    echo "racecheck routing rc=$?: $(grep -E 'RACECHECK SUMMARY' "$OUT/t/racecheck-routing.log" | tail -1)"
  }
  call_tests tests || exit 1
  [[ $2 == tests ]] && { call_end; exit 0; }
fi
( cd build-base-carry && tar xzf base.tar.gz )
build_gpu steadymoe_cli || exit 1
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
bench_run v4p-new - --workload deepseek-v4-flash --format fp4 --tokens 16384 --trace
BENCH_CLI=$B bench_run v4p-base - --workload deepseek-v4-flash --format fp4 --tokens 16384 --trace
for f in "$OUT"/t/*.json; do python3 - "$f" <<'KERNELS'
import json, os, sys
for p in json.load(open(sys.argv[1]))["points"]:
    ks = [(k["name"].split("(")[0][-28:], round(k["start_us"], 1), round(k["us"], 1))
          for k in p.get("kernel_trace", []) if "route" in k["name"] or "combine" in k["name"]]
    print(os.path.basename(sys.argv[1]), p["tokens"], "untimed", round(p.get("layer_untimed_us", 0), 1), ks)
KERNELS
done
call_end
