#!/usr/bin/env bash
# Call 3: FP4 x e4m3 (per-32) decode batches past 12 rows an expert on 32-token CTAs (Fp4E4m3Mid, four to an
# SM), past 24 on the 64-token ones, at $1 = the tree's commit, carried (`bash bench/carry_build.sh
# steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer`). Controls in the same build:
# STEADYMOE_FP4_WIDE_DECODE=0 (16-row tiles, as before) and =32 (at most 32). Tests: the three suites, the FP4
# batch test under both switches, memcheck on it. Bench: deepseek-v4-flash fp4 at 512, 768, 1024 and 1360
# tokens (12, 18, 24, about 32 rows an expert), default, =32 and =0 alternating twice.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
for knob in STEADYMOE_FP4_WIDE_DECODE=0 STEADYMOE_FP4_WIDE_DECODE=32; do
  run_test test_cuda_grouped_gemm $knob "*Fp4MeetingE4m3*"
done
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-420}
v4=(--workload deepseek-v4-flash --format fp4 --tokens 512,768,1024,1360)
for r in 1 2; do
  bench_run v4-64-$r - "${v4[@]}"
  bench_run v4-32-$r STEADYMOE_FP4_WIDE_DECODE=32 "${v4[@]}"
  bench_run v4-16-$r STEADYMOE_FP4_WIDE_DECODE=0 "${v4[@]}"
done
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
