#!/usr/bin/env bash
# Call 5, at $1 (197bd16) with times64.patch on the working tree: the per-32 64-token CTAs that take their rows
# by tensor copies make each stage's token scales 64 * s_a once (a consumer thread a token, then a named
# barrier), in place of every thread's 16 products a block; STEADYMOE_SCALES_TIMES_64=0 keeps the old kernel
# (byte-identical machine code to 197bd16's, a local compile), to compare in the same build. Tests: the FP4
# grouped GEMM tests and test_cuda_layer with it on; memcheck. Bench: per-32 deepseek-v4-flash at 4096 and 16384
# tokens, on against off, alternating, three times.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm "" "*Fp4*:*BlockExact*:*IndexedRows*"
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=520
wl() { echo --workload deepseek-v4-flash --format fp4 --tokens 4096,16384 --trace; }
for r in 1 2 3; do
  bench_run v4-off-$r STEADYMOE_SCALES_TIMES_64=0 $(wl)
  bench_run v4-on-$r - $(wl)
done
grep -E "^(===|16384 |4096 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/v4-*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    ks=[round(k['us'],1) for k in p.get('kernel_trace',[]) if 'decode_kernel' in k['name']]
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), ks[:2])"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
