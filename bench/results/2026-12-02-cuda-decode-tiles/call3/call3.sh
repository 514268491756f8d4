#!/usr/bin/env bash
# Session call 3: at $1 (call 2's commit, plus: the tile lists keep room for any smaller batch's shorter tiles, so a
# smaller batch never drops the graphs; 8-token FP4 CTAs only where experts average at most 4 rows; a six-stage
# variant of them behind STEADYMOE_FP4_THIN_STAGES=6). Every GPU test with each variant, the FP4 tests under the
# six-stage variant, memcheck on the FP4 x e4m3 kernel's every form; deepseek-v4-flash fp4 (and the variant),
# qwen3 bf16, deepseek-v3 fp8.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
for t in test_cuda_grouped_gemm test_cuda_tensor_core; do
  STEADYMOE_FP4_THIN_STAGES=6 timeout 60 build-gpu/tests/$t --gtest_filter='*Fp4*:*fp4*' > $OUT/t/deep-$t.log 2>&1
  echo "$t with STEADYMOE_FP4_THIN_STAGES=6: rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/t/deep-$t.log | tr '\n' ' ')" >> $OUT/tests.txt
done
timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
  --gtest_filter='CudaGroupedGemm.Fp4MeetingE4m3*:CudaGroupedGemm.FewRowCtas*' > $OUT/t/memcheck.log 2>&1
echo "memcheck (FP4 x e4m3 every form, few-row CTAs in decode tiles): rc=$? $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED)' $OUT/t/memcheck.log | tr '\n' ' ')" >> $OUT/tests.txt
echo "checks done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env setting (or -), then bench args
  local name=$1 knob=$2; shift 2
  (( SECONDS - start < 480 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name ($knob)" >> $OUT/bench.txt
  if [[ $knob == - ]]; then knob=STEADYMOE_UNSET=1; fi
  env $knob timeout 120 $b bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
d="--tokens 1,8,128,256"
run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384
run v4-deep STEADYMOE_FP4_THIN_STAGES=6 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
run q - --workload qwen3-30b-a3b --format bf16 $d
run v3 - --workload deepseek-v3 --format fp8 $d
cd $OUT && tar czf t.tgz t && rm -rf t
