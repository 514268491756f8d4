#!/usr/bin/env bash
# Call 3 (4c31fcc; base 2c9310d, change3.patch taken back): deepseek-v3 fp8 at 1 and 16384 tokens with kernel
# traces: early weights on (twice) and off, against the base; the e4m3 row copies' kernel time in the traces at
# 16384 (copy_rows_kernel<false> against gather_e4m3_rows_kernel), early weights' at one token.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli || exit 1
build_base bench/tmp-call/s30/change3.patch steadymoe_cli
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
v3=(--workload deepseek-v3 --format fp8 --tokens 1,16384 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,16384 --trace)
off=STEADYMOE_EARLY_WEIGHTS=0
bench_run q3-on - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-base - "${q3[@]}"
bench_run v3-on - "${v3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run v3-base - "${v3[@]}"
bench_run v3-off $off "${v3[@]}"; bench_run v3-on2 - "${v3[@]}"
BENCH_CLI=./build-base/steadymoe bench_run v3-base2 - "${v3[@]}"
compare_named q3-base q3-on v3-base v3-on v3-off v3-on2 v3-base2
runs=(); for n in q3-base q3-on v3-base v3-on v3-off v3-on2; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
grep -E "gather|copy_rows|decode_kernel|span" $OUT/traces.md | head -40
cd $OUT && tar czf t.tgz t && rm -rf t
