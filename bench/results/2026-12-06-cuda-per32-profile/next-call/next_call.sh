#!/usr/bin/env bash
# Prepared for the next session's first call, at $1 (a8ee9ba or a later commit with the same kernels and layer
# code), with two patches (both apply to a8ee9ba; they touch different files):
# - wide-epilogue.patch: the 64-token FP4 x e4m3 CTAs' epilogue reads each token's row data once (shuffled to
#   the lanes) and iterates SwiGLU's gate pairs only (the profile of bench/results/2026-12-06-cuda-per32-profile.md
#   put a fifth of the gate/up's instructions and the down GEMM's top stall in the epilogue). Only the four
#   64-token kernels change (the other 19 of grouped_gemm_sm90_decode.cu are byte-identical, a local compile).
# - early-sources.patch: where the routed gate/up reads its e4m3 source rows in place (decode batches), the
#   side stream quantises them right after its fork, before the routing, and the main stream waits on an event
#   after the routing, in place of a quantisation between the routing and the gate/up. STEADYMOE_EARLY_SOURCES=0
#   keeps the old order in the same build (the same bits). Compiled and the CPU suite passed locally; never run
#   on a GPU.
# build-gpu has both; build-base has early-sources only (wide-epilogue.patch taken back). Tests in build-gpu: the
# FP4 grouped GEMM tests (the 64-token CTAs against the decode forms, bit for bit), test_cuda_layer (decode
# batches against prefill ones, graphs against eager launches), memcheck on the per-32 test. Then per-32
# deepseek-v4-flash at 16384 tokens, patched against base, twice; and at 1 and 8 tokens deepseek-v4-flash and
# deepseek-v3, early sources against STEADYMOE_EARLY_SOURCES=0, alternating, twice for deepseek-v4-flash. (About
# 8 minutes; on an H200 add the README's figures: bench/results/2026-12-06-cuda-route-kernels next_call.sh's bench
# lines.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
here=bench/results/2026-12-06-cuda-per32-profile/next-call
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
patch -s -p1 < $here/wide-epilogue.patch && patch -s -p1 < $here/early-sources.patch || exit 1
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
BENCH_BUDGET_S=520
B=build-base/steadymoe
X=STEADYMOE_EARLY_SOURCES=0
wl() { echo --workload $1 --format $2 --tokens $3 --trace; }
for r in 1 2; do
  BENCH_CLI=$B bench_run v4-16384-base-$r - $(wl deepseek-v4-flash fp4 16384)
  bench_run v4-16384-epilogue-$r - $(wl deepseek-v4-flash fp4 16384)
done
for r in 1 2; do
  bench_run v4-decode-early-$r - $(wl deepseek-v4-flash fp4 1,8)
  bench_run v4-decode-late-$r "$X" $(wl deepseek-v4-flash fp4 1,8)
done
bench_run v3-decode-early - $(wl deepseek-v3 fp8 1,8)
bench_run v3-decode-late "$X" $(wl deepseek-v3 fp8 1,8)
grep -E "^(===|16384 |8 |1 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f'))
for p in d['points']:
    ks=[round(k['us'],1) for k in p.get('kernel_trace',[]) if 'decode_kernel' in k['name']]
    print('$f'.split('/')[-1], p['tokens'], p.get('output_fnv1a'), 'untimed', round(p.get('layer_untimed_us'),1), 'routed', round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), ks[:2] if p['tokens'] > 8 else '')"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
