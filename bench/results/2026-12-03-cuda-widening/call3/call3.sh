#!/usr/bin/env bash
# Session call 3: at $1 (the FP4 x e4m3 decode's held token scales: their places loaded before the barrier that
# releases the producer, their copies waited for at the first block's fold), cut to the device time left: the
# grouped-GEMM GPU tests (memcheck only with MEMCHECK=1); deepseek-v4-flash fp4 decode with this build and with 75f2beb (call 1's; from
# bench/tmp-call/prev.tar), alternating, same call.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/prev
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
tar -xf bench/tmp-call/prev.tar -C /tmp/prev
( cmake -S /tmp/prev -B /tmp/prev/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-prev.log 2>&1 &&
  cmake --build /tmp/prev/b --target steadymoe_cli -j 6 > $OUT/t/build-prev.log 2>&1; echo "prev CLI: rc=$?" > $OUT/t/built-prev.txt ) &
prev_pid=$!
cmake --build build-gpu -j 10 --target steadymoe_cli test_cuda_grouped_gemm > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in test_cuda_grouped_gemm; do
  echo "=== $t" >> $OUT/t/gpu-tests.log
  timeout 150 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$t: rc=$rc"
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [[ ${MEMCHECK:-0} == 1 ]]; then
  timeout 120 $san --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*E4m3*' > $OUT/t/memcheck.log 2>&1
  rc=$?; echo "memcheck of the FP4 x e4m3 and decode-kernel tests: rc=$rc $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
fi
grep -h "FP4 x e4m3 CTAs per SM\|relative error" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
wait $prev_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
bench_prev() {
  local name=$1; shift
  if (( SECONDS - start >= BENCH_BUDGET_S )); then echo "($name skipped)" >> $OUT/bench.txt; return; fi
  echo "=== $name (75f2beb)" >> $OUT/bench.txt
  timeout 120 /tmp/prev/b/steadymoe bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS - start)) s)" >> $OUT/bench.txt
}
BENCH_BUDGET_S=150
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,256
bench_prev v4-prev --workload deepseek-v4-flash --format fp4 --tokens 1,8,256
bench_run v4-again - --workload deepseek-v4-flash --format fp4 --tokens 1,8
bench_prev v4-prev-again --workload deepseek-v4-flash --format fp4 --tokens 1,8
cd $OUT && tar czf t.tgz t && rm -rf t
