#!/usr/bin/env bash
# Call 2 (s40; commit in $1; build-gpu kept from call 1): deepseek-v3 fp8 setup with its upload through
# page-locked staging against STEADYMOE_PINNED_UPLOADS=0, alternating; qwen3 bf16 at 1/8/1024/16384 tokens,
# deepseek-v3 fp8 and deepseek-v4-flash fp4 at 1/8 tokens; then the s38 plan's diagnostic (no-row-scales.patch:
# no per-row activation-scale copies, wrong outputs, the same MMAs and folds; only its times mean anything)
# against the default on deepseek-v3 fp8 at 16384 tokens, alternating; the peers on qwen3's record last.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=500
U="STEADYMOE_PINNED_UPLOADS=0"
v3s=(--workload deepseek-v3 --format fp8 --tokens 1)
bench_run v3up - "${v3s[@]}"; bench_run v3plain "$U" "${v3s[@]}"
bench_run v3up2 - "${v3s[@]}"; bench_run v3plain2 "$U" "${v3s[@]}"
for n in v3up v3plain v3up2 v3plain2; do echo "== $n"; grep "^\[bench" $OUT/t/$n.log | grep -v "experts generated"; done
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,1024,16384)
bench_run q - "${q[@]}"
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8
patch -s -p1 < bench/tmp-call/s40/no-row-scales.patch || { echo "the patch does not apply"; exit 1; }
configure_and_build build-diag diag steadymoe_cli; echo "diagnostic build rc=$? at $((SECONDS - start)) s"
patch -s -R -p1 < bench/tmp-call/s40/no-row-scales.patch
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run v3 - "${v3[@]}"
BENCH_CLI=./build-diag/steadymoe bench_run v3noscales - "${v3[@]}"
unset BENCH_CLI; bench_run v3-2 - "${v3[@]}"
BENCH_CLI=./build-diag/steadymoe bench_run v3noscales2 - "${v3[@]}"
unset BENCH_CLI
compare_named q v4 v3 v3noscales v3-2 v3noscales2
(( SECONDS - start < 520 )) && timeout 70 python3 bench/gpu_peers.py $OUT/t/peers.json $OUT/t/q.json > $OUT/peers.txt 2>&1
cat $OUT/peers.txt 2>/dev/null
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
