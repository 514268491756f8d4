#!/usr/bin/env bash
# Call 3, main at $1 (7cc1517 + the bench's `experts µs` column): the tensor-core GPU test, and the three
# workloads' decode points, so that the layer's time over its experts' alone is read on main's own code.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 --target steadymoe_cli test_cuda_tensor_core > $OUT/t/build.log 2>&1 ||
  { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
timeout 120 build-gpu/tests/test_cuda_tensor_core > $OUT/t/gpu-tests.log 2>&1; echo "test_cuda_tensor_core: rc=$?"
grep -E "^\[  FAILED|Failure|PASSED" $OUT/t/gpu-tests.log | head
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=200
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128
bench_run qwen3 - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
python3 bench/compare_runs.py v4=$OUT/t/v4.json v3=$OUT/t/v3.json qwen3=$OUT/t/qwen3.json > $OUT/compare.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
