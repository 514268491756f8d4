#!/usr/bin/env bash
# At $1, carried (`bash bench/carry_build.sh steadymoe_cli test_cuda_grouped_gemm test_cuda_layer
# test_cuda_tensor_core`), two comparisons in one call, each against its switch, alternating, three rounds:
# - held token scales waited for once a decode CTA's first stage has landed (the build's default) against
#   before it (STEADYMOE_HELD_SCALES_FIRST=1): deepseek-v4-flash fp4 at 1, 8 and 128 tokens with traces (its
#   FP4 x e4m3 decode CTAs are the ones that hold scales);
# - the router GEMM's k blocks (prepared as the one-token-rank record's call 2, taken in here before it ran):
#   qwen3-30b-a3b with blocks of 128, deepseek-v4-flash and deepseek-v3 with 256, beside the default,
#   at 1, 8 and 16384 tokens.
# Tests first: the grouped GEMM, layer and tensor-core suites both ways of the held scales, the tensor-core suite
# with each router block; memcheck and initcheck on the grouped GEMM suite's FP4 tests.
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || return 1
  run_test test_cuda_grouped_gemm
  run_test test_cuda_grouped_gemm STEADYMOE_HELD_SCALES_FIRST=1
  run_test test_cuda_layer
  run_test test_cuda_tensor_core
  run_test test_cuda_tensor_core STEADYMOE_HELD_SCALES_FIRST=1
  run_test test_cuda_tensor_core STEADYMOE_ROUTER_K_CHUNK=128
  run_test test_cuda_tensor_core STEADYMOE_ROUTER_K_CHUNK=256
  memcheck test_cuda_grouped_gemm '*Fp4*'
  compute-sanitizer --tool initcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4*' > "$OUT/t/initcheck-gemm.log" 2>&1
  echo "initcheck grouped gemm fp4 rc=$?: $(grep -E 'ERROR SUMMARY' "$OUT/t/initcheck-gemm.log" | tail -1)"
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BENCH_BUDGET_S:-480}
names=()
for r in 1 2 3; do
  again=$([[ $r == 1 ]] || echo "-again$r")  # compare_runs.py folds the later rounds in as medians
  bench_run v4-behind$again - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128 --trace
  bench_run v4-first$again STEADYMOE_HELD_SCALES_FIRST=1 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128 --trace
  names+=(v4-behind$again v4-first$again)
done
for r in 1 2 3; do
  again=$([[ $r == 1 ]] || echo "-again$r")
  bench_run q-base$again - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,16384 --trace
  bench_run q-k128$again STEADYMOE_ROUTER_K_CHUNK=128 --workload qwen3-30b-a3b --format bf16 --tokens 1,8,16384 --trace
  bench_run v4-base$again - --workload deepseek-v4-flash --format fp4 --tokens 1,8,16384 --trace
  bench_run v4-k256$again STEADYMOE_ROUTER_K_CHUNK=256 --workload deepseek-v4-flash --format fp4 --tokens 1,8,16384 --trace
  bench_run v3-base$again - --workload deepseek-v3 --format fp8 --tokens 1,8,16384 --trace
  bench_run v3-k256$again STEADYMOE_ROUTER_K_CHUNK=256 --workload deepseek-v3 --format fp8 --tokens 1,8,16384 --trace
  names+=(q-base$again q-k128$again v4-base$again v4-k256$again v3-base$again v3-k256$again)
done
compare_named "${names[@]}"
traces=()
for n in v4-behind v4-first q-base q-k128 v4-base v4-k256 v3-base v3-k256; do [[ -f $OUT/t/$n.json ]] && traces+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_traces.py "${traces[@]}" > "$OUT/traces.md" 2>&1 && grep -E "^#|route|DecodeShape<w2|span" "$OUT/traces.md" | head -60
call_end
