#!/usr/bin/env bash
# Session call 3: at $1 (token scales held only by the FP4 x e4m3 decode CTAs of 8 and 16 tokens; 64-token and
# FP8 CTAs as before, per stage). Every GPU test binary once; the grouped-GEMM and layer tests with
# STEADYMOE_HELD_TOKEN_SCALES=0; memcheck on the FP4 x e4m3 and decode-kernel tests; deepseek-v4-flash decode,
# held against per stage; deepseek-v4-flash at 16384 tokens and decode against 3a9f665 (the session's base,
# built from bench/tmp-call/old.tar), same call.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/old
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
tar -xf bench/tmp-call/old.tar -C /tmp/old
cmake -S /tmp/old -B /tmp/old/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-old.log 2>&1
cmake --build /tmp/old/b --target steadymoe_cli -j 16 > $OUT/t/build-old.log 2>&1 || { grep -E error -A5 $OUT/t/build-old.log | head -20; }
echo "old CLI built at $((SECONDS-start)) s"
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 90 $t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$(basename $t): rc=$rc"
done
for knob in STEADYMOE_HELD_TOKEN_SCALES=0; do
  for t in test_cuda_grouped_gemm test_cuda_layer; do
    echo "=== $t ($knob)" >> $OUT/t/gpu-tests.log
    env $knob timeout 60 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$t with $knob: rc=$rc"
  done
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 120 $san --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
  --gtest_filter='*Fp4MeetingE4m3*:*DecodeKernelPartial*' > $OUT/t/memcheck.log 2>&1
rc=$?; echo "memcheck of the FP4 x e4m3 and decode-kernel tests: rc=$rc $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -h "FP4 x e4m3 CTAs per SM\|relative error" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
bench_old() {
  local name=$1; shift
  if (( SECONDS - start >= BENCH_BUDGET_S )); then echo "($name skipped)" >> $OUT/bench.txt; return; fi
  echo "=== $name (3a9f665)" >> $OUT/bench.txt
  timeout 120 /tmp/old/b/steadymoe bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS - start)) s)" >> $OUT/bench.txt
}
BENCH_BUDGET_S=500
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_old v4-old --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-prefill - --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_old v4-prefill-old --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_run v4-per-stage STEADYMOE_HELD_TOKEN_SCALES=0 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
cd $OUT && tar czf t.tgz t && rm -rf t
