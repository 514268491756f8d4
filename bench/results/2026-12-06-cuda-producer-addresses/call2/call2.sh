#!/usr/bin/env bash
# Call 2, at $1 (the tree as committed), with shuffled-row.patch: one helper (stage::shuffled_row) hands a row's
# epilogue data (row, destination, weight) to a warp's lanes in both the tiled kernel's drain_parked and the
# 64-token decode CTAs' wide_epilogue, which each wrote the three shuffles out. A local compile: the 23 decode
# kernels' machine code is unchanged; 12 of the 62 tiled kernels' changes (the persistent ones that park f32
# results), so it is measured before it lands. build-gpu has the patch; the base is the commit, call 1's build
# where the warm machine still has it, else built from a copy of the tree. Tests: the grouped GEMM suite. Bench,
# base and patched alternating twice: qwen3-30b-a3b bf16 and deepseek-v3 fp8 at 16384 tokens.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+shuffled-row
start=$SECONDS
here=bench/results/2026-12-06-cuda-producer-addresses/call2
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
# (the base is the tree as committed: call 1's base build of the same commit, where the machine still has it)
if [[ ! -x /tmp/base-src/build-base/steadymoe ]]; then
  rm -rf /tmp/base-src && mkdir /tmp/base-src && tar --exclude=./build-gpu --exclude=./build-base -cf - . | tar -xf - -C /tmp/base-src
  ( cd /tmp/base-src && cmake -S . -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-build-base.log 2>&1 &&
    cmake --build build-base -j 8 --target steadymoe_cli > $OUT/t/build-base.log 2>&1; echo "base build rc=$? at $((SECONDS - start)) s" ) &
else echo "base: call 1's build"; fi
patch -s -p1 < $here/shuffled-row.patch || exit 1
build_gpu steadymoe_cli test_cuda_grouped_gemm || exit 1
run_test test_cuda_grouped_gemm
wait
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-540}
B=/tmp/base-src/build-base/steadymoe
for r in 1 2; do
  BENCH_CLI=$B bench_run q-base-$r - --workload qwen3-30b-a3b --format bf16 --tokens 16384
  bench_run q-shuf-$r - --workload qwen3-30b-a3b --format bf16 --tokens 16384
  BENCH_CLI=$B bench_run v3-base-$r - --workload deepseek-v3 --format fp8 --tokens 16384
  bench_run v3-shuf-$r - --workload deepseek-v3 --format fp8 --tokens 16384
done
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
