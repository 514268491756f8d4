#!/usr/bin/env bash
# Call 7 (commit in $1): tall tiles' gate/ups that park SwiGLU outputs run in weight pairs from 4 KiB weight
# columns, as those that park f32 results do (call 6's profiler: the gate/up, in row pairs, read 23.6 GB from
# DRAM, 83% busy). deepseek-v3 and deepseek-v4-flash fp8 at 16384 tokens (shared expert after), default
# against STEADYMOE_WEIGHT_PAIRS=0; the gate/up times compared (that knob takes the down GEMM's pairs too).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=200
A=STEADYMOE_SHARED_FORK=after
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp8 --tokens 16384"
bench_run v3 $A $v3
bench_run v3-unpaired "$A STEADYMOE_WEIGHT_PAIRS=0" $v3
bench_run v4f8 $A $v4
bench_run v4f8-unpaired "$A STEADYMOE_WEIGHT_PAIRS=0" $v4
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), round(p.get('shared_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
