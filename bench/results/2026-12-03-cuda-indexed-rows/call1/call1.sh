#!/usr/bin/env bash
# Session call 1: at $1 (the decode kernel reads the gate/up GEMM's rows in place through the permutation's
# row index where a gather would only copy them). Every GPU test binary once; the grouped-GEMM, tensor-core and
# layer tests with STEADYMOE_INDEXED_ROWS=0; memcheck on the indexed-rows test; decode points of the three
# workloads and deepseek-v4-flash at 16384 tokens, rows in place against gathered.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 90 $t >> $OUT/t/gpu-tests.log 2>&1; echo "$(basename $t): rc=$?"
done
for knob in STEADYMOE_INDEXED_ROWS=0; do
  for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
    echo "=== $t ($knob)" >> $OUT/t/gpu-tests.log
    env $knob timeout 60 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; echo "$t with $knob: rc=$?"
  done
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 120 $san --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*IndexedRows*' > $OUT/t/memcheck.log 2>&1
echo "memcheck of the indexed-rows test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log)"
grep -h "rows read in place\|not read in place" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=530
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
bench_run q-gathered STEADYMOE_INDEXED_ROWS=0 --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-gathered STEADYMOE_INDEXED_ROWS=0 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128
bench_run v3-gathered STEADYMOE_INDEXED_ROWS=0 --workload deepseek-v3 --format fp8 --tokens 1,8,128
bench_run v4-prefill - --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_run v4-prefill-gathered STEADYMOE_INDEXED_ROWS=0 --workload deepseek-v4-flash --format fp4 --tokens 16384
cd $OUT && tar czf t.tgz t && rm -rf t
