#!/usr/bin/env bash
# Call 3, at $1 (the previous session's final tree): the suites not run at this tree (test_cuda_layer,
# test_cuda_tensor_core, the grouped GEMM suite's tall-tile and block-exact tests); then block-exact
# deepseek-v4-flash fp4 (shared expert after) at 8192 tokens (192 rows an expert), the layer's choice (tall
# tiles) against STEADYMOE_TALL_TILES=0, alternating twice, and at 16384 with half-rows.patch
# (bench/results/2026-12-06-cuda-converting-warps/next-call) built beside, tall and 128-row tiles each.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
nc=bench/results/2026-12-06-cuda-converting-warps/next-call
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_layer test_cuda_tensor_core test_cuda_grouped_gemm || exit 1
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_grouped_gemm "" "*TallTiles*:*BlockExact*"
grep -h "row tiles:" $OUT/t/gpu-tests.log
echo "tests done at $((SECONDS-start)) s"
patch -s -p1 < $nc/half-rows.patch && configure_and_build build-half-rows build-half-rows steadymoe_cli && echo "half-rows built at $((SECONDS-start)) s"
patch -s -R -p1 < $nc/half-rows.patch
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=430
A="STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1"
O=STEADYMOE_TALL_TILES=0
v4() { echo --workload deepseek-v4-flash --format fp4 --tokens $1; }
H=build-half-rows/steadymoe
bench_run v4x-8192 "$A" $(v4 8192)
bench_run v4x-8192-128 "$A $O" $(v4 8192)
bench_run v4x-16384 "$A" $(v4 16384)
[[ -x $H ]] && BENCH_CLI=$H bench_run v4x-half-rows "$A" $(v4 16384)
bench_run v4x-16384-128 "$A $O" $(v4 16384)
[[ -x $H ]] && BENCH_CLI=$H bench_run v4x-half-rows-128 "$A $O" $(v4 16384)
bench_run v4x-8192-2 "$A" $(v4 8192)
bench_run v4x-8192-128-2 "$A $O" $(v4 8192)
grep -E "^(===|16384 |8192 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
