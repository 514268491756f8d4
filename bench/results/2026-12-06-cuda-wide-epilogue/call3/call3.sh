#!/usr/bin/env bash
# Call 3, at $1 (eb90850) with fence.patch on the working tree: the 64-token CTAs that take their token rows by
# tensor copies (decode_kernel_rows_by_map) skip the per-stage proxy fence, as the tiled kernel does with its
# tensor copies. build-base is the tree without fence.patch. Tests: the FP4 grouped GEMM tests (rows by tensor
# copies among them), test_cuda_layer, memcheck. Bench: per-32 deepseek-v4-flash at 16384 and 4096 tokens,
# patched against base, alternating, twice. On an H200 also the README's figures (as the route-kernels
# session's next_call.sh).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
here=bench/results/2026-12-06-cuda-wide-epilogue/call3
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm "" "*Fp4*:*BlockExact*:*IndexedRows*"
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
build_base $here/fence.patch steadymoe_cli
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
B=build-base/steadymoe
wl() { echo --workload deepseek-v4-flash --format fp4 --tokens $1 --trace; }
for r in 1 2; do
  BENCH_CLI=$B bench_run v4-base-$r - $(wl 4096,16384)
  bench_run v4-fence-$r - $(wl 4096,16384)
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,16384
  bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128,16384
  bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,16384
  bench_run v4x STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
fi
grep -E "^(===|16384 |4096 |8 |1 |128 |256 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/v4-*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    ks=[round(k['us'],1) for k in p.get('kernel_trace',[]) if 'decode_kernel' in k['name']]
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), ks[:2])"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
