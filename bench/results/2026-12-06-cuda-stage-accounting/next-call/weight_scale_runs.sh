#!/usr/bin/env bash
# Prepared, not run: at $1 plus weight-scale-runs.patch (FP8 weights' two weight scales a stage by two 16-byte
# bulk copies from lane 0, a run of four blocks each, in place of two lanes' 4-byte cp.async, where the scale
# rows lie 16-byte aligned: k/128 a multiple of 4; consumers read block % 4 of a run). Local build: no MMA
# serialised; FP8 kernels 1-11 registers more, the block-exact FP4 parked-scatter kernel spilling 4 bytes.
# Tests with the patch, the base built beside it, then deepseek-v3 fp8 and block-exact deepseek-v4-flash at
# 16384 tokens (shared expert after), patched against base, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/results/2026-12-06-cuda-stage-accounting/next-call/weight-scale-runs.patch
patch -s -p1 < $P || { echo 'weight-scale-runs.patch does not apply'; exit 1; }
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=540
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
A=STEADYMOE_SHARED_FORK=after
B=./build-base/steadymoe
bench_run v3-new $A $v3
BENCH_CLI=$B bench_run v3-base $A $v3
BENCH_CLI=$B bench_run v3-base2 $A $v3
bench_run v3-new2 $A $v3
bench_run v4x-new "$A STEADYMOE_FP4_BLOCK_EXACT=1" $v4
BENCH_CLI=$B bench_run v4x-base "$A STEADYMOE_FP4_BLOCK_EXACT=1" $v4
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
