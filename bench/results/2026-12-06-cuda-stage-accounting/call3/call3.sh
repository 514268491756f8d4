#!/usr/bin/env bash
# Call 3: at $1 plus producer-accounting.patch (call 2's cycle accounting, with the producer's time in each
# stage's load split into lane 0's copies, the rows' and scales' cp.async, and the cp.async arrive; and
# STEADYMOE_DIAG_SCALES: 1 reads each stage's 128 row scales from contiguous addresses, 2 copies none; both
# give wrong results, for timing only). Routed experts, shared expert after, 16384 tokens.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
P=bench/results/2026-12-06-cuda-stage-accounting/call3/producer-accounting.patch
patch -s -p1 < $P || { echo 'producer-accounting.patch does not apply'; exit 1; }
source bench/device_tests.sh
source bench/bench_runs.sh
BENCH_BUDGET_S=400
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli || exit 1
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
bench_run v3-m0 STEADYMOE_SHARED_FORK=after $v3
bench_run v3-m1 "STEADYMOE_SHARED_FORK=after STEADYMOE_DIAG_SCALES=1" $v3
bench_run v3-m2 "STEADYMOE_SHARED_FORK=after STEADYMOE_DIAG_SCALES=2" $v3
bench_run v3-m0b STEADYMOE_SHARED_FORK=after $v3
bench_run v4-m0 STEADYMOE_SHARED_FORK=after $v4
bench_run v4-m2 "STEADYMOE_SHARED_FORK=after STEADYMOE_DIAG_SCALES=2" $v4
grep -E "^(===|16384 |ACCT|\()" $OUT/bench.txt | cut -c1-600
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
