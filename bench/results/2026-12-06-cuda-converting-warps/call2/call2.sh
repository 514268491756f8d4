#!/usr/bin/env bash
# Call 2 (commit in $1): block-exact FP4 weights on tall tiles, two epilogue warps converting each block. The
# grouped GEMM suite whole (its tall-tile test now covers block-exact FP4 at k 1024 and 4096), the tall-tile
# test in weight pairs (STEADYMOE_WEIGHT_PAIRS=1), the tensor-core and layer suites, memcheck on the tall-tile
# test; then block-exact deepseek-v4-flash fp4 at 16384 tokens (shared expert after), tall against
# STEADYMOE_TALL_TILES=0 (128-row tiles, the consumers converting), alternating; tall in weight pairs
# (STEADYMOE_WEIGHT_PAIRS=1); at 4096; and as served.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_WEIGHT_PAIRS=1 "*TallTiles*"
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*TallTiles*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=520
A="STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1"
O=STEADYMOE_TALL_TILES=0
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
v4s="--workload deepseek-v4-flash --format fp4 --tokens 4096"
bench_run v4x "$A" $v4
bench_run v4x-128 "$A $O" $v4
bench_run v4x-2 "$A" $v4
bench_run v4x-128-2 "$A $O" $v4
bench_run v4x-pairs "$A STEADYMOE_WEIGHT_PAIRS=1" $v4
bench_run v4x-4096 "$A" $v4s
bench_run v4x-4096-128 "$A $O" $v4s
bench_run v4x-served STEADYMOE_FP4_BLOCK_EXACT=1 $v4
bench_run v4x-served-128 "STEADYMOE_FP4_BLOCK_EXACT=1 $O" $v4
grep -E "^(===|16384 |4096 |\(|  FP4)" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), round(p.get('shared_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
