#!/usr/bin/env bash
# Call 2: decode batches past 24 rows an expert on 64-row tiles — bf16 weights on 64-token CTAs (Bf16Wider,
# three to an SM), FP8 weights meeting e4m3 rows on 64-token CTAs (Fp8Wider, four to an SM) — at $1 = the
# tree's commit, carried (`bash bench/carry_build.sh steadymoe_cli test_cuda_grouped_gemm
# test_cuda_tensor_core test_cuda_layer`). Controls in the same build: STEADYMOE_BF16_WIDE_DECODE=32 (call 1's
# form: at most 32-row tiles), =0 (16-row tiles), STEADYMOE_FP8_WIDE_DECODE=0 (32-row tiles). Tests: the three
# suites; the grouped GEMM suite's few-row test under each switch; memcheck on it. Bench: qwen3-30b-a3b bf16
# at 256, 384, 512 tokens, default and =32 alternating twice, =0 once; deepseek-v3 fp8 at 512, 768, 1024
# tokens (16, 24, 32 an expert) default and FP8 =0, twice; deepseek-v4-flash bf16 at 1024 and 1360 tokens (24,
# about 32) default and =32 once each.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
for knob in STEADYMOE_BF16_WIDE_DECODE=0 STEADYMOE_BF16_WIDE_DECODE=32 STEADYMOE_FP8_WIDE_DECODE=0; do
  run_test test_cuda_grouped_gemm $knob "*FewRow*"
done
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*FewRow*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-420}
q=(--workload qwen3-30b-a3b --format bf16 --tokens 256,384,512)
v3=(--workload deepseek-v3 --format fp8 --tokens 512,768,1024)
for r in 1 2; do
  bench_run qwen3-64-$r - "${q[@]}"
  bench_run qwen3-32-$r STEADYMOE_BF16_WIDE_DECODE=32 "${q[@]}"
  bench_run v3-64-$r - "${v3[@]}"
  bench_run v3-32-$r STEADYMOE_FP8_WIDE_DECODE=0 "${v3[@]}"
done
bench_run qwen3-16-1 STEADYMOE_BF16_WIDE_DECODE=0 "${q[@]}"
v4=(--workload deepseek-v4-flash --format bf16 --tokens 1024,1360)
bench_run v4-64-1 - "${v4[@]}"
bench_run v4-32-1 STEADYMOE_BF16_WIDE_DECODE=32 "${v4[@]}"
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
