#!/usr/bin/env bash
# Session call 1: at $1 (persistent CTAs take items in groups of 8 row tiles from counters; decode shapes with
# one CTA more to an SM behind STEADYMOE_DECODE_CTAS_PER_SM=more). Every GPU test with each variant; then
# deepseek-v3 fp8 and qwen3 bf16 prefill against the strided order; decode with one CTA more to an SM.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=520
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 16384
bench_run v3-strided STEADYMOE_ITEM_ORDER=strided --workload deepseek-v3 --format fp8 --tokens 16384
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,16384
bench_run q-strided STEADYMOE_ITEM_ORDER=strided --workload qwen3-30b-a3b --format bf16 --tokens 16384
bench_run q-more STEADYMOE_DECODE_CTAS_PER_SM=more --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 128,256
bench_run v4-more STEADYMOE_DECODE_CTAS_PER_SM=more --workload deepseek-v4-flash --format fp4 --tokens 128,256
bench_run v3-grouped STEADYMOE_ITEM_ORDER=grouped --workload deepseek-v3 --format fp8 --tokens 16384
cd $OUT && tar czf t.tgz t && rm -rf t
