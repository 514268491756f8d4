#!/usr/bin/env bash
# Session call 2: at $1 (8-token FP4 x e4m3 CTAs back to one consumer warpgroup, now with four 128-wide k blocks a
# stage and three stages; the test's long-k case at 1664; the FewRowCtas test no longer asks for tiles taller than
# the GPU's). Every GPU test with each variant (now also STEADYMOE_FP4_THIN_BLOCKS=2 and STEADYMOE_QUANTISE_ONCE=1);
# memcheck on the FP4 x e4m3 kernel's every form; deepseek-v4-flash fp4 against two blocks a stage; deepseek-v4 and
# deepseek-v3 decode steps against quantising once (STEADYMOE_QUANTISE_ONCE=1); qwen3 bf16.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
  --gtest_filter='CudaGroupedGemm.Fp4MeetingE4m3*:CudaGroupedGemm.FewRowCtas*' > $OUT/t/memcheck.log 2>&1
echo "memcheck (FP4 x e4m3 every form, few-row CTAs): rc=$? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/t/memcheck.log | tr '\n' ' ')" >> $OUT/tests.txt
echo "checks done at $((SECONDS-start)) s" >> $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=520
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-pairs STEADYMOE_FP4_THIN_BLOCKS=2 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
bench_run v4-once STEADYMOE_QUANTISE_ONCE=1 --workload deepseek-v4-flash --format fp4 --tokens 1,8
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8
bench_run v3-once STEADYMOE_QUANTISE_ONCE=1 --workload deepseek-v3 --format fp8 --tokens 1,8
bench_run v4-again - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
cd $OUT && tar czf t.tgz t && rm -rf t
