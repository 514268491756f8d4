#!/usr/bin/env bash
# Prepared for the next session (its device time was spent): at $1 plus accounting.patch (call 3's cycle
# accounting on top of block-major row scales: where the parked kernels' producer and consumers spend their
# cycles now that a stage's row scales come by one tensor copy). deepseek-v3 fp8 and block-exact
# deepseek-v4-flash at 16384 tokens, shared expert after; then the same without the patch (built beside it),
# for the README's prefill figures where the machine is an H200.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/results/2026-12-06-cuda-stage-accounting/next-call/accounting.patch
patch -s -p1 < $P || { echo 'accounting.patch does not apply'; exit 1; }
source bench/device_tests.sh
source bench/bench_runs.sh
BENCH_BUDGET_S=480
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli || exit 1
( build_base $P steadymoe_cli > $OUT/t/base-build.txt 2>&1 ) &
base=$!
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
A=STEADYMOE_SHARED_FORK=after
bench_run v3-acct $A $v3
bench_run v4x-acct "$A STEADYMOE_FP4_BLOCK_EXACT=1" $v4
wait $base; cat $OUT/t/base-build.txt
if [[ -x build-base/steadymoe ]]; then
  BENCH_CLI=./build-base/steadymoe bench_run v3 $A $v3
  BENCH_CLI=./build-base/steadymoe bench_run v3-served - $v3
  BENCH_CLI=./build-base/steadymoe bench_run v4 - $v4
  BENCH_CLI=./build-base/steadymoe bench_run v4x STEADYMOE_FP4_BLOCK_EXACT=1 $v4
fi
grep -E "^(===|16384 |ACCT|\()" $OUT/bench.txt | cut -c1-600
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
