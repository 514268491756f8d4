#!/usr/bin/env bash
# Session call 3: at $1 (persistent CTAs with counters ask for their next item as each item starts). Each GPU
# test binary once, the grouped-GEMM, tensor-core and layer tests under the strided order; deepseek-v3 fp8 and
# qwen3 bf16 prefill against the strided order, and deepseek-v3 with counters over one-tile groups.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  [[ $t == *.cmake ]] && continue
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 120 $t >> $OUT/t/gpu-tests.log 2>&1; echo "$(basename $t): rc=$?"
done
for knob in STEADYMOE_ITEM_ORDER=strided STEADYMOE_ITEM_GROUP_TILES=2; do
  for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
    echo "=== $t ($knob)" >> $OUT/t/gpu-tests.log
    env $knob timeout 60 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; echo "$t with $knob: rc=$?"
  done
done
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=420
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 16384
bench_run v3-strided STEADYMOE_ITEM_ORDER=strided --workload deepseek-v3 --format fp8 --tokens 16384
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 256,16384
bench_run v3-one-tile-groups STEADYMOE_ITEM_GROUP_TILES=1 --workload deepseek-v3 --format fp8 --tokens 16384
cd $OUT && tar czf t.tgz t && rm -rf t
