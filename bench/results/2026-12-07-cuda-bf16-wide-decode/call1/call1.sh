#!/usr/bin/env bash
# Call 1: bf16 decode batches whose experts average more than 8 rows take 32-row tiles on 32-token CTAs
# (Bf16Wide, grouped_gemm_sm90_decode.cu), at $1 = the tree's commit, carried
# (`bash bench/carry_build.sh steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer`);
# the control is the same build with STEADYMOE_BF16_WIDE_DECODE=0 (16-row tiles, the same bits). Tests: the
# three suites, the grouped GEMM suite's few-row test with the switch off too, memcheck on that test. Bench,
# the two ways alternating twice: qwen3-30b-a3b bf16 at 128, 256, 384 and 512 tokens (8, 16, 24, 32 rows an
# expert); deepseek-v4-flash bf16 at 512 and 1024 tokens (12, 24) once each way.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_BF16_WIDE_DECODE=0 "*FewRow*"
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*FewRow*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-420}
for r in 1 2; do
  bench_run qwen3-wide-$r - --workload qwen3-30b-a3b --format bf16 --tokens 128,256,384,512
  bench_run qwen3-narrow-$r STEADYMOE_BF16_WIDE_DECODE=0 --workload qwen3-30b-a3b --format bf16 --tokens 128,256,384,512
done
bench_run v4-wide-1 - --workload deepseek-v4-flash --format bf16 --tokens 512,1024
bench_run v4-narrow-1 STEADYMOE_BF16_WIDE_DECODE=0 --workload deepseek-v4-flash --format bf16 --tokens 512,1024
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
