#!/usr/bin/env bash
# Prepared for the next session's first call, at $1 (35b5800 or a later commit with the same kernels), with
# producer-addresses.patch: the decode kernel's producer warp works out its shared-memory addresses once (the
# stage base, the full and empty barriers), laundered through an asm statement so that the compiler keeps
# them, and keeps the stage index and its parity as the loop goes; its scale copies read from a per-row run
# worked out once. A local compile: the per-32 64-token kernel's producer stage loop 127 -> 104 instructions,
# no S2UR left in it (the profiler had the producer at about 130 executed instructions a stage, 8.8% of the
# gate/up's: bench/results/2026-12-06-cuda-wide-epilogue.md, call 6). Every decode kernel changes (all take
# this producer); the tiled kernels' machine code should not (the patch adds overloads only). Registers rise
# (the per-lane scale runs are 64-bit pointers): the 64-token per-32 kernels 122 -> 126 and 128, block-exact
# 96 -> 108, all within their launch bounds (three CTAs an SM: 136), no spills (a helper's local compile).
# build-gpu has the patch, build-base not. Tests in build-gpu: the whole grouped GEMM suite, test_cuda_layer,
# memcheck on the per-32 and FP8 decode tests. Bench, base and patched alternating twice: deepseek-v4-flash fp4
# at 1, 8, 128, 256, 4096 and 16384 tokens; deepseek-v3 fp8 and qwen3-30b-a3b bf16 at 1, 8 and 128. About 9
# minutes. Land it only if faster with the same digests.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+producer-addresses
start=$SECONDS
here=bench/results/2026-12-06-cuda-wide-epilogue/next-call
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
patch -s -p1 < $here/producer-addresses.patch || exit 1
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*:*Decode*"
build_base $here/producer-addresses.patch steadymoe_cli
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
B=build-base/steadymoe
for r in 1 2; do
  BENCH_CLI=$B bench_run v4-base-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384
  bench_run v4-prod-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384
done
for r in 1 2; do
  BENCH_CLI=$B bench_run v3-base-$r - --workload deepseek-v3 --format fp8 --tokens 1,8,128
  bench_run v3-prod-$r - --workload deepseek-v3 --format fp8 --tokens 1,8,128
  BENCH_CLI=$B bench_run q-base-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
  bench_run q-prod-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
done
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
