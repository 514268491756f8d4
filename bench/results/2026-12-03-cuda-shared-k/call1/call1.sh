#!/usr/bin/env bash
# Session call 1: at $1 (FP4 and FP8 x e4m3 decode launches of few CTAs share each tile's k range among a cluster
# of CTAs, STEADYMOE_SHARED_K=0 keeps one CTA a tile). Every GPU test binary once; the new test with the knob;
# memcheck and racecheck on the new test; deepseek-v4-flash fp4 decode shared / knob / a446347 (the session's base,
# built from bench/tmp-call/old.tar); deepseek-v3 fp8 at 1 and 8 tokens shared / knob; same call.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/old
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
tar -xf bench/tmp-call/old.tar -C /tmp/old
( cmake -S /tmp/old -B /tmp/old/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-old.log 2>&1 &&
  cmake --build /tmp/old/b --target steadymoe_cli -j 8 > $OUT/t/build-old.log 2>&1; echo "old CLI: rc=$?" > $OUT/t/old-built.txt ) &
old_pid=$!
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 120 $t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$(basename $t): rc=$rc"
done
echo "=== grouped_gemm sharing test (STEADYMOE_SHARED_K=0)" >> $OUT/t/gpu-tests.log
STEADYMOE_SHARED_K=0 timeout 60 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Sharing*' >> $OUT/t/gpu-tests.log 2>&1; rc=$?
echo "sharing test with STEADYMOE_SHARED_K=0: rc=$rc"
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  timeout 150 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Sharing*' > $OUT/t/$tool.log 2>&1
  rc=$?; echo "$tool of the sharing test: rc=$rc $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
grep -h "FP4 x e4m3 CTAs per SM\|relative error" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
wait $old_pid; cat $OUT/t/old-built.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
bench_old() {
  local name=$1; shift
  if (( SECONDS - start >= BENCH_BUDGET_S )); then echo "($name skipped)" >> $OUT/bench.txt; return; fi
  echo "=== $name (a446347)" >> $OUT/bench.txt
  timeout 120 /tmp/old/b/steadymoe bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS - start)) s)" >> $OUT/bench.txt
}
BENCH_BUDGET_S=520
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-one-cta STEADYMOE_SHARED_K=0 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_old v4-old --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8
bench_run v3-one-cta STEADYMOE_SHARED_K=0 --workload deepseek-v3 --format fp8 --tokens 1,8
bench_run v4-again - --workload deepseek-v4-flash --format fp4 --tokens 1
cd $OUT && tar czf t.tgz t && rm -rf t
