#!/usr/bin/env bash
# Session call 2: at $1 (persistent CTAs read the next item from counters after their epilogue; the BF16, FP8 and
# 16-token FP4 x e4m3 decode shapes five, seven and five to an SM by default). Each GPU test binary once, the
# grouped-GEMM, tensor-core and layer tests under the item-order and decode-shape variants; deepseek-v3 fp8 and
# qwen3 bf16 prefill against the strided order; decode points of the three workloads.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 120 $t >> $OUT/t/gpu-tests.log 2>&1; echo "$(basename $t): rc=$?"
done
for knob in STEADYMOE_ITEM_ORDER=strided STEADYMOE_ITEM_ORDER=grouped STEADYMOE_ITEM_GROUP_TILES=2 STEADYMOE_DECODE_CTAS_PER_SM=fewer STEADYMOE_PAIRED_CTAS=0; do
  for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
    echo "=== $t ($knob)" >> $OUT/t/gpu-tests.log
    env $knob timeout 60 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; echo "$t with $knob: rc=$?"
  done
done
grep -E "^\[  FAILED|Failure|Which is|CTAs per SM" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=500
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 16384
bench_run v3-strided STEADYMOE_ITEM_ORDER=strided --workload deepseek-v3 --format fp8 --tokens 16384
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,16384
bench_run q-strided STEADYMOE_ITEM_ORDER=strided --workload qwen3-30b-a3b --format bf16 --tokens 16384
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v3-decode - --workload deepseek-v3 --format fp8 --tokens 1,8,128
bench_run v3-decode-fewer STEADYMOE_DECODE_CTAS_PER_SM=fewer --workload deepseek-v3 --format fp8 --tokens 1,8,128
cd $OUT && tar czf t.tgz t && rm -rf t
