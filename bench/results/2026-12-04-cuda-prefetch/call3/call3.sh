#!/usr/bin/env bash
# Call 3 (session 24) at $1 (diag/trace: main + the per-CTA trace patch, not for main): where a one-token decode
# CTA's time goes now — deepseek-v4-flash (FP4 x e4m3 four to an SM), deepseek-v3 (FP8 thin), qwen3 (bf16 deep).
set -u
export STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
source bench/bench_runs.sh
BENCH_BUDGET_S=200
bench_run v4-trace STEADYMOE_DECODE_TRACE=0 --workload deepseek-v4-flash --format fp4 --tokens 1 --trace
bench_run v3-trace STEADYMOE_DECODE_TRACE=0 --workload deepseek-v3 --format fp8 --tokens 1 --trace
bench_run qwen3-trace STEADYMOE_DECODE_TRACE=0 --workload qwen3-30b-a3b --format bf16 --tokens 1 --trace
grep -E "^===|\[trace\]|^\| *1 " $OUT/bench.txt
cd $OUT && tar czf t.tgz t && rm -rf t
