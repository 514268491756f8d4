#!/usr/bin/env bash
# Call 4: the final tree after the review's mends (one rule for taller decode tiles, one mapping from tile
# height to CTA tokens), at $1 = its commit, carried (`bash bench/carry_build.sh steadymoe_cli
# test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer`). Tests: the three suites; the grouped GEMM
# suite whole under STEADYMOE_DECODE_TILES=full (as bench/run_gpu.sh runs it); its few-row and FP4 batch
# tests under each taller-tile switch and STEADYMOE_FP4_THIN_CTAS=0; memcheck on both. Bench, once each at
# the default: qwen3-30b-a3b bf16 at 512 tokens, deepseek-v3 fp8 at 1024, deepseek-v4-flash fp4 at 1360 (the
# points calls 2 and 3 measured, to see the same tiles taken).
source bench/call_common.sh "$1"
tests() {
  build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || return 1
  run_test test_cuda_grouped_gemm
  run_test test_cuda_grouped_gemm STEADYMOE_DECODE_TILES=full
  for knob in STEADYMOE_BF16_WIDE_DECODE=0 STEADYMOE_BF16_WIDE_DECODE=32 STEADYMOE_FP8_WIDE_DECODE=0 \
              STEADYMOE_FP4_WIDE_DECODE=0 STEADYMOE_FP4_WIDE_DECODE=32 STEADYMOE_FP4_THIN_CTAS=0; do
    run_test test_cuda_grouped_gemm $knob "*FewRow*:*Fp4MeetingE4m3*"
  done
  run_test test_cuda_tensor_core
  run_test test_cuda_layer
  memcheck test_cuda_grouped_gemm "*FewRow*:*Fp4MeetingE4m3*"
}
call_tests tests || exit 1
BENCH_BUDGET_S=${BUDGET:-480}
bench_run qwen3-512 - --workload qwen3-30b-a3b --format bf16 --tokens 512
bench_run v3-1024 - --workload deepseek-v3 --format fp8 --tokens 1024
bench_run v4-1360 - --workload deepseek-v4-flash --format fp4 --tokens 1360
call_end
