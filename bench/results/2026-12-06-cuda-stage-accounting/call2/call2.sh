#!/usr/bin/env bash
# Call 2: at $1 plus cycle-accounting.patch (diagnostic: in every parked persistent kernel, clock64 spans summed
# over a process's launches and printed at its exit as ACCT lines: the consumers' full waits, blocks, drained
# waits and parking; the epilogue warps' waits and drains; the producer's empty waits). Routed experts with the
# shared expert after (and deepseek-v3 as served), at 16384 tokens; then the same runs from a build without the
# patch (built while the first runs go), to see what the counters cost.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
P=bench/results/2026-12-06-cuda-stage-accounting/cycle-accounting.patch
patch -s -p1 < $P || { echo 'cycle-accounting.patch does not apply'; exit 1; }
source bench/device_tests.sh
source bench/bench_runs.sh
BENCH_BUDGET_S=540
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli || exit 1
( build_base $P steadymoe_cli > $OUT/t/base-build.txt 2>&1 ) &
base=$!
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
qw="--workload qwen3-30b-a3b --format bf16 --tokens 16384"
bench_run v3-acct STEADYMOE_SHARED_FORK=after $v3
bench_run v3-acct-served - $v3
bench_run v4-acct STEADYMOE_SHARED_FORK=after $v4
bench_run v4x-acct "STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1" $v4
bench_run qw-acct STEADYMOE_SHARED_FORK=after $qw
wait $base; cat $OUT/t/base-build.txt
if [[ -x build-base/steadymoe ]]; then
  BENCH_CLI=./build-base/steadymoe bench_run v3-base STEADYMOE_SHARED_FORK=after $v3
  BENCH_CLI=./build-base/steadymoe bench_run v4-base STEADYMOE_SHARED_FORK=after $v4
  BENCH_CLI=./build-base/steadymoe bench_run qw-base STEADYMOE_SHARED_FORK=after $qw
  bench_run v3-acct2 STEADYMOE_SHARED_FORK=after $v3
fi
grep -E "^(===|16384 |ACCT|\()" $OUT/bench.txt | cut -c1-400
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
