#!/usr/bin/env bash
# Call 4 (commit in $1), asked of an H200 with the session's last device time: the README's figures as served at
# this commit (its H200 figures are from 2026-12-03 to 2026-12-05; the changes since were measured on H100s):
# each workload at 1, 8, 128, 256 and 16384 tokens, block-exact deepseek-v4-flash at 16384, then the dense
# bf16 rate and torch._grouped_mm beside qwen3's record (bench/gpu_peers.py). What the time allows, in that order.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
build_gpu steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=330
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,16384
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128,16384
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,16384
bench_run v4x STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
compare_named q v3 v4 v4x > /dev/null 2>&1
grep -E "^(===|[0-9]+ )" $OUT/bench.txt | cut -c1-260
(( SECONDS - start < 300 )) && [[ -f $OUT/t/q.json ]] && timeout 80 python3 bench/gpu_peers.py $OUT/t/peers.json $OUT/t/q.json > $OUT/peers.txt 2>&1
cat $OUT/peers.txt 2>/dev/null | head -30
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
