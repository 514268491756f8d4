#!/usr/bin/env bash
# Prepared for the next session (this one's device time was spent): at $1 plus held-pairs.patch, which has the
# row quantiser look a token's pair rows up once an item and hold them in registers (where top_k <= 8), in
# place of two dependent loads before every store (the trace of call 6: 671 µs for deepseek-v3's hidden states
# at 16384 tokens, 59% of the copy bandwidth). Built locally, not run.
# Tests with the patch: the grouped GEMM suite (its tall-tile test now counts the weight pairs that tall
# SwiGLU gate/ups run in since 1ee944c, which no suite has run on a GPU yet), the gathers, tensor-core and
# layer suites, the tensor-core suite with STEADYMOE_WEIGHT_PAIRS=0, and the WeightPairsParkedSwiGlu variant's
# grouped GEMM tests (STEADYMOE_WEIGHT_PAIRS=1: tall SwiGLU gate/ups in weight pairs at k 1024 too). Then
# deepseek-v3 fp8 at 16384 tokens (shared expert after), base against patched, alternating, the last pair with
# kernel traces; on an H200 the README's prefill figures after them.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/results/2026-12-06-cuda-tall-swiglu/next-call/held-pairs.patch
patch -s -p1 < $P || { echo 'held-pairs.patch does not apply'; exit 1; }
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_gathers test_cuda_tensor_core test_cuda_layer || exit 1
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_gathers
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_tensor_core STEADYMOE_WEIGHT_PAIRS=0
run_test test_cuda_grouped_gemm STEADYMOE_WEIGHT_PAIRS=1 "*Bf16Epilogues*:*PersistentSwiGlus*:*TallTiles*"
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=540
A=STEADYMOE_SHARED_FORK=after
B=./build-base/steadymoe
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
BENCH_CLI=$B bench_run v3-base $A $v3
bench_run v3-held $A $v3
BENCH_CLI=$B bench_run v3-base-trace $A $v3 --trace
bench_run v3-held-trace $A $v3 --trace
grep -h "quantise_rows\|route_kernel\|first start" $OUT/t/v3-*-trace.log
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bench_run v3-served - $v3
  bench_run v4-served - --workload deepseek-v4-flash --format fp4 --tokens 16384
  bench_run v4x-served STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
fi
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), round(p.get('shared_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
