#!/usr/bin/env bash
# Call 2 (commit in $1): tall tiles park the gate/up's SwiGLU outputs as bf16 by default (four stages, where
# parked f32 results leave three) and their fourth warpgroup keeps 80 registers. The grouped GEMM, tensor-core
# and layer suites whole; the tensor-core suite and the tall-tile test with STEADYMOE_PARKED_SWIGLU=0, the
# tall-tile test with STEADYMOE_TALL_TILES=0. Then deepseek-v4-flash and deepseek-v3 fp8 (shared expert after)
# at 16384 tokens, default against STEADYMOE_PARKED_SWIGLU=0, alternating; deepseek-v3 at 4096 and as served.
# On an H200, the README's prefill figures after them.
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
run_test test_cuda_tensor_core STEADYMOE_PARKED_SWIGLU=0
run_test test_cuda_grouped_gemm STEADYMOE_PARKED_SWIGLU=0 "*TallTiles*"
run_test test_cuda_grouped_gemm STEADYMOE_TALL_TILES=0 "*TallTiles*"
grep -h "FAILED\|Failure\|tall tiles" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=560
A=STEADYMOE_SHARED_FORK=after
O=STEADYMOE_PARKED_SWIGLU=0
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp8 --tokens 16384"
bench_run v4f8 $A $v4
bench_run v4f8-f32 "$A $O" $v4
bench_run v4f8-2 $A $v4
bench_run v4f8-f32-2 "$A $O" $v4
bench_run v3 $A $v3
bench_run v3-f32 "$A $O" $v3
bench_run v3-4096 $A --workload deepseek-v3 --format fp8 --tokens 4096
bench_run v3-4096-f32 "$A $O" --workload deepseek-v3 --format fp8 --tokens 4096
bench_run v3-served - $v3
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bench_run v4-served - --workload deepseek-v4-flash --format fp4 --tokens 16384
  bench_run v4x-served STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
  bench_run v4f8-served - $v4
fi
grep -E "^(===|16384 |4096 |\()" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), round(p.get('shared_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
