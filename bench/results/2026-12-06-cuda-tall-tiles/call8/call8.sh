#!/usr/bin/env bash
# Call 8 (commit in $1): tall tiles by default. The grouped GEMM, tensor-core and layer suites whole, the
# tensor-core suite with STEADYMOE_TALL_TILES=0; deepseek-v3 fp8 at 16384 tokens as served and with the shared
# expert after, default against STEADYMOE_TALL_TILES=0.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_tensor_core STEADYMOE_TALL_TILES=0
run_test test_cuda_grouped_gemm STEADYMOE_TALL_TILES=0 "*TallTiles*"
grep -h "FAILED\|Failure\|tall tiles" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=300
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
O=STEADYMOE_TALL_TILES=0
bench_run v3-served - $v3
bench_run v3-served-128 $O $v3
bench_run v3-128 "STEADYMOE_SHARED_FORK=after $O" $v3
bench_run v3 STEADYMOE_SHARED_FORK=after $v3
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
