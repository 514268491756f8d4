#!/usr/bin/env bash
# Call 1, at $1: the previous session's prepared producer-addresses.patch (its next_call.sh, made leaner for a
# short device budget): the decode kernel's producer warp works out its shared-memory addresses once and
# keeps its stage index and parity as it goes (bench/results/2026-12-06-cuda-wide-epilogue/next-call). The two
# builds run side by side: build-gpu from the tree with the patch, build-base from a copy without it. Tests
# (patched): test_cuda_grouped_gemm whole, test_cuda_layer, memcheck on the FP4 x e4m3 tests. Bench, base and
# patched alternating: deepseek-v4-flash fp4 at 1, 8, 128, 4096 and 16384 tokens twice; deepseek-v3 fp8 and
# qwen3-30b-a3b bf16 at 1, 8 and 128 once.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+producer-addresses
start=$SECONDS
patchfile=bench/results/2026-12-06-cuda-producer-addresses/call1/producer-addresses.patch
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
rm -rf /tmp/base-src && mkdir /tmp/base-src && tar --exclude=./build-gpu --exclude=./build-base -cf - . | tar -xf - -C /tmp/base-src
patch -s -p1 < $patchfile || exit 1
( cd /tmp/base-src && cmake -S . -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-build-base.log 2>&1 &&
  cmake --build build-base -j 8 --target steadymoe_cli > $OUT/t/build-base.log 2>&1; echo "base build rc=$? at $((SECONDS - start)) s" ) &
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
wait
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "base build rc=0" $OUT/tests.txt || { echo "no base build"; grep -E "error" -A3 $OUT/t/build-base.log | head -20; }
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-400}
B=/tmp/base-src/build-base/steadymoe
for r in 1 2; do
  BENCH_CLI=$B bench_run v4-base-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,4096,16384
  bench_run v4-prod-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,4096,16384
done
BENCH_CLI=$B bench_run v3-base - --workload deepseek-v3 --format fp8 --tokens 1,8,128
bench_run v3-prod - --workload deepseek-v3 --format fp8 --tokens 1,8,128
BENCH_CLI=$B bench_run q-base - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
bench_run q-prod - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
