#!/usr/bin/env bash
# Session call 1: at $1 (the last session's unrun commits; 8-token FP4 x e4m3 CTAs with two consumer warpgroups
# folding in turn; decode steps quantising their tokens straight into their slots). Every GPU test with each
# variant; memcheck and racecheck on the FP4 x e4m3 kernel's every form; deepseek-v4-flash fp4 against one
# consumer warpgroup (STEADYMOE_THIN_WARPGROUPS=1), qwen3 bf16, deepseek-v3 fp8.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
for tool in memcheck racecheck; do
  timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
    --gtest_filter='CudaGroupedGemm.Fp4MeetingE4m3*' > $OUT/t/$tool.log 2>&1
  echo "$tool (FP4 x e4m3 every form): rc=$? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/t/$tool.log | tr '\n' ' ')" >> $OUT/tests.txt
done
echo "checks done at $((SECONDS-start)) s" >> $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=500
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,16384
bench_run v4-solo STEADYMOE_THIN_WARPGROUPS=1 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128,256
cd $OUT && tar czf t.tgz t && rm -rf t
