#!/usr/bin/env bash
# Session call 3: at $1 (the final state: few-row launches never park; device code identical to call 2's).
# Every GPU test binary once and the layer test with epilogues always parked; deepseek-v4-flash fp4 at 16384
# tokens by the rule (its FP8 shared expert's gate/up, k = 4096, parked) and never parked.
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
echo "=== test_cuda_layer (STEADYMOE_PARKED_EPILOGUES=1)" >> $OUT/t/gpu-tests.log
STEADYMOE_PARKED_EPILOGUES=1 timeout 60 build-gpu/tests/test_cuda_layer >> $OUT/t/gpu-tests.log 2>&1; echo "test_cuda_layer with STEADYMOE_PARKED_EPILOGUES=1: rc=$?"
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=200
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_run v4-registers STEADYMOE_PARKED_EPILOGUES=0 --workload deepseek-v4-flash --format fp4 --tokens 16384
cd $OUT && tar czf t.tgz t && rm -rf t
