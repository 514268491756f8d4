#!/usr/bin/env bash
# Session call 2: at $1 (FP4 weights meeting e4m3 activations made e4m3 exactly per row and 128-wide block by a
# shift table: one tensor-core sum and one fold per block). Builds it and, from bench/tmp-call/old.tar (git
# archive of 6be2abe, the per-32 arithmetic), the previous CLI. Every GPU test binary once; memcheck on the
# FP4 x e4m3 grouped-GEMM tests; deepseek-v4-flash fp4 at 16384 tokens and at 1..256, new against old, same call.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/old
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
grep -h "C75" $OUT/t/build.log | grep -o "C75[0-9]*.*for the function '[^']*'" | cut -c1-200 | sort | uniq -c
tar -xf bench/tmp-call/old.tar -C /tmp/old
cmake -S /tmp/old -B /tmp/old/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-old.log 2>&1
cmake --build /tmp/old/b --target steadymoe_cli -j 16 > $OUT/t/build-old.log 2>&1 || { grep -E error -A5 $OUT/t/build-old.log | head -20; }
echo "old CLI built at $((SECONDS-start)) s"
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 90 $t >> $OUT/t/gpu-tests.log 2>&1; echo "$(basename $t): rc=$?"
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 150 $san --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4*:*IndexedRows*' > $OUT/t/memcheck.log 2>&1
echo "memcheck of the FP4 grouped-GEMM tests: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log)"
grep -hE "relative error|FP4 x e4m3 CTAs|CTAs per SM on this GPU" $OUT/t/gpu-tests.log | sort | uniq -c | head -20
grep -E "^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
bench_old() {
  local name=$1; shift
  if (( SECONDS - start >= BENCH_BUDGET_S )); then echo "($name skipped)" >> $OUT/bench.txt; return; fi
  echo "=== $name (6be2abe: per-32 sums)" >> $OUT/bench.txt
  timeout 120 /tmp/old/b/steadymoe bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS - start)) s)" >> $OUT/bench.txt
}
BENCH_BUDGET_S=520
bench_run v4-prefill - --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
bench_old v4-prefill-old --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_old v4-old --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
cd $OUT && tar czf t.tgz t && rm -rf t
