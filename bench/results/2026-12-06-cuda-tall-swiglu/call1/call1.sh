#!/usr/bin/env bash
# Prepared for the next session (this one's device time was spent): at $1 plus tall-next.patch, which
# - gives the three-warpgroup CTAs' fourth warpgroup 80 registers a thread where it had 64 (the consumers keep
#   144; a local -Xptxas -v build: its spills of 4-40 bytes fall to 8/20 bytes in one kernel, none elsewhere);
# - lets tall tiles park their SwiGLU outputs as bf16 where STEADYMOE_PARKED_SWIGLU=1 asks (four stages, where
#   parked f32 results leave three; never by default).
# Tests with the patch (the tall-tile and parked tests, the tensor-core suite, and the tensor-core and layer
# suites with STEADYMOE_PARKED_SWIGLU=1, which run the new form), then deepseek-v3 and deepseek-v4-flash
# fp8 at 16384 tokens (shared expert after): base, patched, patched with parked SwiGLU outputs, alternating.
# On an H200, the README's prefill figures after them (deepseek-v3 as served and deepseek-v4-flash fp4,
# default and block-exact).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/results/2026-12-06-cuda-tall-tiles/next-call/tall-next.patch
patch -s -p1 < $P || { echo 'tall-next.patch does not apply'; exit 1; }
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm "" "*TallTiles*:*Parked*:*Persistent*:*WeightPairs*:*BlockMajor*"
run_test test_cuda_tensor_core
run_test test_cuda_tensor_core STEADYMOE_PARKED_SWIGLU=1
run_test test_cuda_layer STEADYMOE_PARKED_SWIGLU=1
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=540
A=STEADYMOE_SHARED_FORK=after
S=STEADYMOE_PARKED_SWIGLU=1
B=./build-base/steadymoe
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp8 --tokens 16384"
BENCH_CLI=$B bench_run v3-base $A $v3
bench_run v3-new $A $v3
bench_run v3-swiglu "$A $S" $v3
BENCH_CLI=$B bench_run v3-base2 $A $v3
bench_run v3-new2 $A $v3
bench_run v3-swiglu2 "$A $S" $v3
BENCH_CLI=$B bench_run v4f8-base $A $v4
bench_run v4f8-new $A $v4
bench_run v4f8-swiglu "$A $S" $v4
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BENCH_CLI=$B bench_run v3-served - $v3
  BENCH_CLI=$B bench_run v4-served - --workload deepseek-v4-flash --format fp4 --tokens 16384
  BENCH_CLI=$B bench_run v4x-served STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
fi
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
