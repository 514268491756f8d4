#!/usr/bin/env bash
# Prepared for the next session's first call, at $1 (the commit that added STEADYMOE_PER32_STAGGERED, or a
# later one with the same kernels): the per-32 64-token CTAs two to an SM with eight stages, each block's four
# group MMAs staggered over two sets of sums (fp4_e4m3_block_staggered), against the default three to an SM
# that wait for each group's MMA before its fold. A local compile: 156 and 158 registers (cp.async rows, rows by
# tensor copies), no spills, no MMA serialised; in the machine code the MMAs go MMA 0, MMA 1, wait for all but
# one, fold 0, MMA 2, wait, fold 1, MMA 3, wait, fold 2, wait for all, fold 3. One build, the knob switching.
# Tests: test_cuda_grouped_gemm whole, with and without the knob (Fp4MeetingE4m3GivesTheSameBitsInEveryBatch
# compares the 64-token CTAs with the decode forms bit for bit, and checks two CTAs an SM with the knob);
# test_cuda_layer with it; memcheck on the FP4 x e4m3 tests with it. Bench, alternating twice:
# deepseek-v4-flash fp4 at 1024, 4096 and 16384 tokens. About 6 minutes. Make it the default only if faster
# with the same digests; else take the shape out again.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_PER32_STAGGERED=1
run_test test_cuda_layer STEADYMOE_PER32_STAGGERED=1
STEADYMOE_PER32_STAGGERED=1 memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "of 64" $OUT/t/gpu-tests.log && grep "CTAs per SM on this GPU" $OUT/t/gpu-tests.log
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-420}
for r in 1 2; do
  bench_run v4-three-$r - --workload deepseek-v4-flash --format fp4 --tokens 1024,4096,16384
  bench_run v4-staggered-$r STEADYMOE_PER32_STAGGERED=1 --workload deepseek-v4-flash --format fp4 --tokens 1024,4096,16384
done
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
