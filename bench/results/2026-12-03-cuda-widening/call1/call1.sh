#!/usr/bin/env bash
# Session call 1: at $1 (FP4 x e4m3 decode: a block's MMAs at once without ptxas serialising them, and FP4 codes
# packed to widen in five operations). Every GPU test binary once; memcheck on the FP4 x e4m3 tests;
# deepseek-v4-flash fp4 decode with this build, with 26045f7 (the MMAs only; bench/tmp-call/a.tar) and with
# 916acc8 (the session's base; bench/tmp-call/old.tar), in the same call; then 16384 tokens, this build and base.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/old /tmp/mma
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
build_cli() {  # build_cli TAR DIR: the CLI of another tree, in the background
  tar -xf $1 -C $2
  ( cmake -S $2 -B $2/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-$(basename $2).log 2>&1 &&
    cmake --build $2/b --target steadymoe_cli -j 6 > $OUT/t/build-$(basename $2).log 2>&1; echo "$(basename $2) CLI: rc=$?" > $OUT/t/built-$(basename $2).txt ) &
}
build_cli bench/tmp-call/old.tar /tmp/old; old_pid=$!
build_cli bench/tmp-call/a.tar /tmp/mma; mma_pid=$!
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 150 $t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$(basename $t): rc=$rc"
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 150 $san --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*E4m3*:*FewRow*:*DecodeKernel*' > $OUT/t/memcheck.log 2>&1
rc=$?; echo "memcheck of the FP4 x e4m3 and decode-kernel tests: rc=$rc $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -h "FP4 x e4m3 CTAs per SM\|relative error" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
wait $old_pid $mma_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
bench_other() {  # bench_other NAME DIR ARGS...: bench_run with another tree's CLI
  local name=$1 dir=$2; shift 2
  if (( SECONDS - start >= BENCH_BUDGET_S )); then echo "($name skipped)" >> $OUT/bench.txt; return; fi
  echo "=== $name ($dir)" >> $OUT/bench.txt
  timeout 120 $dir/b/steadymoe bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS - start)) s)" >> $OUT/bench.txt
}
BENCH_BUDGET_S=530
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_other v4-mma /tmp/mma --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_other v4-old /tmp/old --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-prefill - --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_other v4-prefill-old /tmp/old --workload deepseek-v4-flash --format fp4 --tokens 16384
cd $OUT && tar czf t.tgz t && rm -rf t
