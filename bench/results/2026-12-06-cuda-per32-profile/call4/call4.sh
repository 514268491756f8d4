#!/usr/bin/env bash
# Call 4, at $1 on call 3's warm machine: half-rows.patch (bench/results/2026-12-06-cuda-converting-warps/next-call)
# in call 3's build-half-rows: the grouped GEMM suite's tall-tile and block-exact tests built and run there; then
# block-exact deepseek-v4-flash fp4 (shared expert after) at 8192 tokens, tall tiles with the patch against
# 128-row tiles without (the tree's build-gpu), alternating, and at 16384 the patch's tall tiles once more.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
nc=bench/results/2026-12-06-cuda-converting-warps/next-call
mkdir -p $OUT/t
source bench/device_tests.sh
{
ls -d build-half-rows build-gpu
patch -s -p1 < $nc/half-rows.patch && configure_and_build build-half-rows build-half-rows steadymoe_cli test_cuda_grouped_gemm && echo "built at $((SECONDS-start)) s"
patch -s -R -p1 < $nc/half-rows.patch
echo "=== half-rows" >> $OUT/t/gpu-tests.log
timeout 120 build-half-rows/tests/test_cuda_grouped_gemm --gtest_filter="*TallTiles*:*BlockExact*:*Fp4BlockConversion*" >> $OUT/t/gpu-tests.log 2>&1
echo "half-rows test_cuda_grouped_gemm: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=280
A="STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1"
O=STEADYMOE_TALL_TILES=0
v4() { echo --workload deepseek-v4-flash --format fp4 --tokens $1; }
H=build-half-rows/steadymoe
BENCH_CLI=$H bench_run v4x-half-rows-8192 "$A" $(v4 8192)
bench_run v4x-8192-128 "$A $O" $(v4 8192)
BENCH_CLI=$H bench_run v4x-half-rows-8192-2 "$A" $(v4 8192)
bench_run v4x-8192-128-2 "$A $O" $(v4 8192)
BENCH_CLI=$H bench_run v4x-half-rows-16384 "$A" $(v4 16384)
grep -E "^(===|16384 |8192 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
