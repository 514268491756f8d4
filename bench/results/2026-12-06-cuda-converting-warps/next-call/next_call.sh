#!/usr/bin/env bash
# Prepared for the next session's first call, at $1 (a commit at or after 2ab73eb): the suites that have not run
# at this tree (test_cuda_permutation with its GroupTiles test of the layer's tile choice, test_cuda_layer,
# test_cuda_tensor_core, the grouped GEMM suite's tall-tile and block-exact tests); then block-exact
# deepseek-v4-flash fp4 (shared expert after) at 4096, 8192 and 16384 tokens, the layer's choice against
# STEADYMOE_TALL_TILES=0, alternating, 8192 twice each (one run each this session: tall 2.8% slower); then two
# conversion patches, each built beside, at 16384 tokens: two-rows.patch (the converting warps unrolled over two
# rows a thread) and half-rows.patch (a converting thread's row of each half and sub-tile with no index
# arithmetic: in a local build its loop takes 115 instructions a row against 155; it also changes the
# 128-row FP4 kernels' machine code, and one weight-pair 128-row kernel's spills, 12 to 44 bytes: hence its
# 128-row run). (About 8-9 minutes; on an H200 add the README's figures: the route-kernels next_call.sh's bench
# lines.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
here=bench/results/2026-12-06-cuda-converting-warps/next-call
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_permutation test_cuda_layer test_cuda_tensor_core test_cuda_grouped_gemm || exit 1
run_test test_cuda_permutation
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_grouped_gemm "" "*TallTiles*:*BlockExact*"
grep -h "row tiles:" $OUT/t/gpu-tests.log
echo "tests done at $((SECONDS-start)) s"
for p in two-rows half-rows; do
  patch -s -p1 < $here/$p.patch && configure_and_build build-$p build-$p steadymoe_cli && echo "$p built at $((SECONDS-start)) s"
  patch -s -R -p1 < $here/$p.patch
done
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=560
A="STEADYMOE_SHARED_FORK=after STEADYMOE_FP4_BLOCK_EXACT=1"
O=STEADYMOE_TALL_TILES=0
v4() { echo --workload deepseek-v4-flash --format fp4 --tokens $1; }
bench_run v4x-4096 "$A" $(v4 4096)
bench_run v4x-4096-128 "$A $O" $(v4 4096)
bench_run v4x-8192 "$A" $(v4 8192)
bench_run v4x-8192-128 "$A $O" $(v4 8192)
bench_run v4x-8192-2 "$A" $(v4 8192)
bench_run v4x-8192-128-2 "$A $O" $(v4 8192)
for r in 1 2; do
  bench_run v4x-$r "$A" $(v4 16384)
  for p in two-rows half-rows; do
    [[ -x build-$p/steadymoe ]] && BENCH_CLI=build-$p/steadymoe bench_run v4x-$p-$r "$A" $(v4 16384)
  done
done
bench_run v4x-128 "$A $O" $(v4 16384)
[[ -x build-half-rows/steadymoe ]] && BENCH_CLI=build-half-rows/steadymoe bench_run v4x-half-rows-128 "$A $O" $(v4 16384)
grep -E "^(===|16384 |8192 |4096 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
