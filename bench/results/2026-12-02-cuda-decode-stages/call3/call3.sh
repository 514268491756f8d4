#!/usr/bin/env bash
# Session call 3: at $1 (8-token FP4 x e4m3 CTAs as at the session's start, four to an SM of four stages of two
# blocks; five or six to an SM of three stages behind STEADYMOE_FP4_THIN_CTAS_PER_SM; no quantising in slots).
# Every GPU test with each variant (the two new ones included); memcheck on the FP4 x e4m3 kernel's every form;
# deepseek-v4-flash fp4 against five and six 8-token CTAs to an SM; qwen3 bf16.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
  --gtest_filter='CudaGroupedGemm.Fp4MeetingE4m3*' > $OUT/t/memcheck.log 2>&1
echo "memcheck (FP4 x e4m3 every form): rc=$? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/t/memcheck.log | tr '\n' ' ')" >> $OUT/tests.txt
for n in 5 6; do
  STEADYMOE_FP4_THIN_CTAS_PER_SM=$n timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
    --gtest_filter='CudaGroupedGemm.Fp4MeetingE4m3*' > $OUT/t/memcheck-$n.log 2>&1
  echo "memcheck (FP4 x e4m3 every form, $n 8-token CTAs to an SM): rc=$? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/t/memcheck-$n.log | tr '\n' ' ')" >> $OUT/tests.txt
done
echo "checks done at $((SECONDS-start)) s" >> $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-five STEADYMOE_FP4_THIN_CTAS_PER_SM=5 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
bench_run v4-six STEADYMOE_FP4_THIN_CTAS_PER_SM=6 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
bench_run v4-again - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
cd $OUT && tar czf t.tgz t && rm -rf t
