#!/usr/bin/env bash
# The e4m3-token decode CTAs read where their rows lie (a_index) before their dependent-launch wait where their
# tiles are older than the kernel before (sources-before-wait.patch, applied to the tree at $1 and carried:
# `bash bench/carry_build.sh steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer`).
# The tree without the patch is built here beside it (build_base, about 100 s). Tests, memcheck on the FP4 GEMM
# tests, then deepseek-v4-flash fp4 at 1, 8 and 128 tokens and deepseek-v3 fp8 at 1 and 8, patched and base
# alternating, three rounds.
source bench/call_common.sh "$1"
here=bench/results/2026-12-08-cuda-sources-before-wait
tests() {
  build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || return 1
  run_test test_cuda_grouped_gemm
  run_test test_cuda_tensor_core
  run_test test_cuda_layer
  memcheck test_cuda_grouped_gemm "*Fp4*"
  build_base $here/sources-before-wait.patch steadymoe_cli || return 1
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BENCH_BUDGET_S:-480}
for r in 1 2 3; do
  again=$([[ $r == 1 ]] && echo "" || echo "-again$r")
  bench_run "v4-new$again" - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
  BENCH_CLI=build-base/steadymoe bench_run "v4-base$again" - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
  bench_run "v3-new$again" - --workload deepseek-v3 --format fp8 --tokens 1,8
  BENCH_CLI=build-base/steadymoe bench_run "v3-base$again" - --workload deepseek-v3 --format fp8 --tokens 1,8
done
compare_named v4-new v4-new-again2 v4-new-again3 v4-base v4-base-again2 v4-base-again3 \
  v3-new v3-new-again2 v3-new-again3 v3-base v3-base-again2 v3-base-again3
call_end
