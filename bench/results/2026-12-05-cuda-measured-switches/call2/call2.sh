#!/usr/bin/env bash
# Call 2 (s39; commit in $1; build-gpu kept from call 1 on the same warm machine): the SwiGLU outputs kept f32
# between the GEMMs (STEADYMOE_SWIGLU_MID=f32) against the bf16 default on deepseek-v3 fp8 at 16384 tokens;
# qwen3 bf16 at 1024 and 16384 tokens, default against parked SwiGLU outputs and in-stage scatters alone;
# deepseek-v4-flash block-exact at 16384 against all three switches; deepseek-v3's tokens over 8 experts, default
# against all three; then the dense bf16 GEMM rate and torch._grouped_mm (bench/gpu_peers.py).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=330
P="STEADYMOE_PARKED_SWIGLU=1" I="STEADYMOE_PARK_IN_STAGE=1" E="STEADYMOE_FP4_BLOCK_EXACT=1"
A="STEADYMOE_PARKED_SWIGLU=1 STEADYMOE_PARK_IN_STAGE=1 STEADYMOE_SWIGLU_E4M3=1" F="STEADYMOE_SWIGLU_MID=f32"
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1024,16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
bench_run v3 - "${v3[@]}"; bench_run f32mid "$F" "${v3[@]}"; bench_run f32mid2 "$F" "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
bench_run q - "${q[@]}"; bench_run qsw "$P" "${q[@]}"; bench_run qin "$I" "${q[@]}"
bench_run qin2 "$I" "${q[@]}"; bench_run qsw2 "$P" "${q[@]}"; bench_run q2 - "${q[@]}"
bench_run v4x "$E" "${v4[@]}"; bench_run v4xall "$E $A" "${v4[@]}"; bench_run v4xall2 "$E $A" "${v4[@]}"; bench_run v4x2 "$E" "${v4[@]}"
bench_run e8 - "${v3[@]}" --experts 8; bench_run e8all "$A" "${v3[@]}" --experts 8
compare_named v3 f32mid f32mid2 v3-2 q qsw qin qin2 qsw2 q2 v4x v4xall v4xall2 v4x2 e8 e8all
(( SECONDS - start < 380 )) && timeout 90 python3 bench/gpu_peers.py $OUT/t/peers.json $OUT/t/q.json > $OUT/peers.txt 2>&1
cat $OUT/peers.txt 2>/dev/null
grep "^\[bench" $OUT/t/v3.log $OUT/t/v4x.log | grep -v "experts generated"
cd $OUT && tar czf t.tgz t && rm -rf t
