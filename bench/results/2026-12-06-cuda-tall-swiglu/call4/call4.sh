#!/usr/bin/env bash
# Call 4 (commit in $1): call 3 again after its one failure (the tests' expected FP4 arithmetic line, which
# did not name tall tiles). Block-exact FP4 weights take tall tiles too (the tiled kernel's three-warpgroup
# CTAs, two warpgroups converting each block). The tensor-core and layer suites whole (call 3 ran the grouped
# GEMM suite, the tall-tile test with STEADYMOE_TALL_TILES=0 and memcheck on the tall-tile test); then
# block-exact deepseek-v4-flash fp4 at 16384 tokens (shared expert after), default against
# STEADYMOE_TALL_TILES=0, alternating, and at 4096; on an H200 the README's prefill figures after them.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_tensor_core test_cuda_layer || exit 1
# (call 3 ran the grouped GEMM suite, the tall-tile test with STEADYMOE_TALL_TILES=0 and memcheck: passed)
run_test test_cuda_tensor_core
run_test test_cuda_layer
grep -h "FAILED\|Failure\|tall tiles" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=560
A="STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1"
O=STEADYMOE_TALL_TILES=0
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
bench_run v4x $A $v4
bench_run v4x-128 "$A $O" $v4
bench_run v4x-2 $A $v4
bench_run v4x-128-2 "$A $O" $v4
bench_run v4x-4096 $A --workload deepseek-v4-flash --format fp4 --tokens 4096
bench_run v4x-4096-128 "$A $O" --workload deepseek-v4-flash --format fp4 --tokens 4096
bench_run v4x-served STEADYMOE_FP4_BLOCK_EXACT=1 $v4
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bench_run v3-served - --workload deepseek-v3 --format fp8 --tokens 16384
  bench_run v4-served - $v4
fi
grep -E "^(===|16384 |4096 |\(|  FP4)" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), round(p.get('shared_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
