#!/usr/bin/env bash
# Prepared for the next session's first call (this one's device time ran out), at $1 (a commit at or after
# 259bc18): the suites that have not run at this tree (routing, with its new top-32 case; permutation; grouped
# GEMM, tensor-core and layer, with the tall tiles' release before the fold as landed), then the README's
# figures as served: each workload at 1, 8, 128, 256 and 16384 tokens, block-exact deepseek-v4-flash at 16384,
# and the dense bf16 rate and torch._grouped_mm beside qwen3's record. Name the GPU the figures came from: the
# README's table is an H200's. (About 7-8 minutes.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_routing
run_test test_cuda_permutation
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
run_test test_cuda_layer
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=480
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,16384
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128,16384
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,16384
bench_run v4x STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
compare_named q v3 v4 v4x > /dev/null 2>&1
grep -E "^(===|[0-9]+ )" $OUT/bench.txt | cut -c1-260
(( SECONDS - start < 480 )) && [[ -f $OUT/t/q.json ]] && timeout 80 python3 bench/gpu_peers.py $OUT/t/peers.json $OUT/t/q.json > $OUT/peers.txt 2>&1
cat $OUT/peers.txt 2>/dev/null | head -30
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
