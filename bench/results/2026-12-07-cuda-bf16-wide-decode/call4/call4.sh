#!/usr/bin/env bash
# Prepared for a later session (not run: two requests found no machine and the device time then left was
# too little to start one): the final tree after the review's mends (one rule for taller decode tiles, one
# mapping from tile height to CTA tokens, the wgmma operand macros), at $1 = its commit, carried (`bash
# bench/carry_build.sh steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer`): the
# grouped GEMM suite's decode, few-row and FP4 tests; its few-row test under STEADYMOE_DECODE_TILES=full,
# STEADYMOE_BF16_WIDE_DECODE=0 and STEADYMOE_FP8_WIDE_DECODE=0; the tensor-core and layer suites. Bench, once
# each at the default: qwen3-30b-a3b bf16 at 512 tokens and deepseek-v4-flash fp4 at 1360 (points calls 2
# and 3 measured, to see the same tiles taken). Run 2026-12-07 (sixty-second session) with the grouped GEMM
# suite whole, also under STEADYMOE_DECODE_TILES=full, and the FP4 batch test under
# STEADYMOE_FP4_WIDE_DECODE=0 and =32.
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || return 1
  run_test test_cuda_grouped_gemm
  run_test test_cuda_grouped_gemm STEADYMOE_DECODE_TILES=full
  for knob in STEADYMOE_BF16_WIDE_DECODE=0 STEADYMOE_FP8_WIDE_DECODE=0; do
    run_test test_cuda_grouped_gemm $knob "*FewRow*"
  done
  for knob in STEADYMOE_FP4_WIDE_DECODE=0 STEADYMOE_FP4_WIDE_DECODE=32; do
    run_test test_cuda_grouped_gemm $knob "*Fp4MeetingE4m3*"
  done
  run_test test_cuda_tensor_core
  run_test test_cuda_layer
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BUDGET:-170}
bench_run qwen3-512 - --workload qwen3-30b-a3b --format bf16 --tokens 512
bench_run v4-1360 - --workload deepseek-v4-flash --format fp4 --tokens 1360
call_end
