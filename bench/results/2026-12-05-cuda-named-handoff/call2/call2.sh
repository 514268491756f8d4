#!/usr/bin/env bash
# Call 2 (s41; commit in $1, with named.patch; build-gpu kept from call 1): the parked hand-off through named
# barriers against mbarriers (build-base: named.patch taken off), alternating: qwen3 bf16 at 16384 tokens
# (parked SwiGLU outputs and scatters), deepseek-v3 fp8 at 16384 (parked scatters); then deepseek-v4-flash fp4
# at one token, the bf16 SwiGLU mid (default) against STEADYMOE_SWIGLU_MID=f32, alternating twice.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
build_base bench/tmp-call/s41/named.patch steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
B=./build-base/steadymoe
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run q - "${q[@]}"; BENCH_CLI=$B bench_run qbase - "${q[@]}"; unset BENCH_CLI
bench_run q2 - "${q[@]}"; BENCH_CLI=$B bench_run qbase2 - "${q[@]}"; unset BENCH_CLI
bench_run v3 - "${v3[@]}"; BENCH_CLI=$B bench_run v3base - "${v3[@]}"; unset BENCH_CLI
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1)
M="STEADYMOE_SWIGLU_MID=f32"
bench_run v4 - "${v4[@]}"; bench_run v4f32 "$M" "${v4[@]}"
bench_run v4-2 - "${v4[@]}"; bench_run v4f32-2 "$M" "${v4[@]}"
BENCH_CLI=$B bench_run v3base2 - "${v3[@]}"; unset BENCH_CLI; bench_run v3-2 - "${v3[@]}"
compare_named q qbase q2 qbase2 v3 v3base v3base2 v3-2 v4 v4f32 v4-2 v4f32-2
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
