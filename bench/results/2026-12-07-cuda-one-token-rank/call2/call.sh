#!/usr/bin/env bash
# The router GEMM's k blocks (STEADYMOE_ROUTER_K_CHUNK) at one and eight tokens and in prefill, before any of
# them becomes a default: qwen3-30b-a3b with blocks of 128 (16 splits in place of 4), deepseek-v4-flash and
# deepseek-v3 with blocks of 256 (16 and 28 splits in place of 8 and 14), each beside the default, alternating,
# three rounds, at 1, 8 and 16384 tokens; the layer and tensor-core suites with each setting first. Carried:
# `bash bench/carry_build.sh steadymoe_cli test_cuda_tensor_core test_cuda_layer` at $1.
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_tensor_core test_cuda_layer || return 1
  run_test test_cuda_tensor_core STEADYMOE_ROUTER_K_CHUNK=128
  run_test test_cuda_tensor_core STEADYMOE_ROUTER_K_CHUNK=256
  run_test test_cuda_layer STEADYMOE_ROUTER_K_CHUNK=128
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BENCH_BUDGET_S:-420}
names=()
for r in 1 2 3; do
  again=$([[ $r == 1 ]] || echo "-again$r")  # compare_runs.py folds the later rounds in as medians
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
for n in q-base q-k128 v4-base v4-k256 v3-base v3-k256; do [[ -f $OUT/t/$n.json ]] && traces+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_traces.py "${traces[@]}" > "$OUT/traces.md" 2>&1 && grep -E "^#|router|route|gemm_kernel<" "$OUT/traces.md" | head -60
call_end
