#!/usr/bin/env bash
# Call 3 (s43; commit in $1): whether folds behind the MMAs pay where stages are plentiful: deepseek-v3 fp8 at
# 16384 tokens with the gate/up's SwiGLU outputs parked as bf16 (STEADYMOE_PARKED_SWIGLU=1: six stages, where
# parked f32 results leave four), folds behind and between, against the default with folds between
# (STEADYMOE_FOLD_BEHIND=0), alternating. The tests ran on this commit in call 2.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
build_gpu steadymoe_cli > $OUT/build.txt 2>&1 || { cat $OUT/build.txt; exit 1; }
cat $OUT/build.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=500
sw=STEADYMOE_PARKED_SWIGLU=1 off=STEADYMOE_FOLD_BEHIND=0
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run sw "$sw" "${v3[@]}"; bench_run swoff "$sw $off" "${v3[@]}"; bench_run off $off "${v3[@]}"
bench_run swoff2 "$sw $off" "${v3[@]}"; bench_run sw2 "$sw" "${v3[@]}"; bench_run off2 $off "${v3[@]}"
compare_named off sw swoff off2 sw2 swoff2
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
