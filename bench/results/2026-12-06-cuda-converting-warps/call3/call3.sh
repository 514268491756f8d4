#!/usr/bin/env bash
# Call 3 (commit in $1): tall tiles' block-exact FP4 blocks in three spare tiles beside parked scatters and
# SwiGLU outputs (two warps convert up to two blocks ahead of the consumers' MMAs; call 2's tree had two spare
# tiles, one block ahead: spares3.patch). The tall-tile and block-exact tests, the tensor-core and layer suites;
# then block-exact deepseek-v4-flash fp4 (shared expert after) at 16384 tokens, tall / 128-row tiles twice, and
# at 4096. (Cut to fit the device time left: call 2's build is not built beside it; 128-row tiles, whose
# kernels both trees share, are the baseline in both calls.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm "" "*TallTiles*:*BlockExact*"
run_test test_cuda_tensor_core
run_test test_cuda_layer
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=330
A="STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1"
O=STEADYMOE_TALL_TILES=0
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
v4s="--workload deepseek-v4-flash --format fp4 --tokens 4096"
bench_run v4x-three "$A" $v4
bench_run v4x-128 "$A $O" $v4
bench_run v4x-three-2 "$A" $v4
bench_run v4x-128-2 "$A $O" $v4
bench_run v4x-three-4096 "$A" $v4s
bench_run v4x-128-4096 "$A $O" $v4s
grep -E "^(===|16384 |4096 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), round(p.get('shared_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
