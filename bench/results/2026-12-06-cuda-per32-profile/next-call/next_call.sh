#!/usr/bin/env bash
# Prepared for the next session's first call, at $1 (f33c952 or a later commit with the same kernels):
# wide-epilogue.patch — the 64-token FP4 x e4m3 CTAs' epilogue reads each token's row data once (shuffled to
# the lanes) and iterates SwiGLU's gate pairs only (the profile of bench/results/2026-12-06-cuda-per32-profile.md
# put a fifth of the gate/up's instructions and the down GEMM's top stall in the epilogue). Only the four
# 64-token kernels change (the other 19 of grouped_gemm_sm90_decode.cu are byte-identical, a local compile).
# The patched tree is built in build-gpu (its tests run there: the FP4 grouped GEMM tests, which compare the
# 64-token CTAs with the decode forms bit for bit, and test_cuda_layer), the tree without it in build-base;
# then per-32 deepseek-v4-flash (the default) at 16384 and 4096 tokens, alternating, twice at 16384. (About 6
# minutes; on an H200 add the README's figures: bench/results/2026-12-06-cuda-route-kernels next_call.sh's
# bench lines.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
here=bench/results/2026-12-06-cuda-per32-profile/next-call
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
patch -s -p1 < $here/wide-epilogue.patch || exit 1
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm "" "*Fp4*:*BlockExact*:*IndexedRows*"
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
build_base $here/wide-epilogue.patch steadymoe_cli
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=500
v4() { echo --workload deepseek-v4-flash --format fp4 --tokens $1 --trace; }
B=build-base/steadymoe
for r in 1 2; do
  BENCH_CLI=$B bench_run v4-16384-base-$r - $(v4 16384)
  bench_run v4-16384-epilogue-$r - $(v4 16384)
done
BENCH_CLI=$B bench_run v4-4096-base - $(v4 4096)
bench_run v4-4096-epilogue - $(v4 4096)
grep -E "^(===|16384 |4096 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0]
ks=[round(k['us'],1) for k in p.get('kernel_trace',[]) if 'decode_kernel' in k['name']]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), ks[:2])"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
