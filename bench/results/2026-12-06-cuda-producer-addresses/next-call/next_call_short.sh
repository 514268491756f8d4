#!/usr/bin/env bash
# next_call.sh cut down for a session with little device time left (about 420 s of run after the start): at $1
# (4b4de1c, or a later commit with the same kernels). One build (about 150 s cold); tests: the grouped GEMM
# suite's FP4 and indexed-rows tests with =staggered and with =two (the default kernels are unchanged since
# 2026-12-06's calls). Bench, the three ways alternating twice, until BUDGET seconds from the start:
# deepseek-v4-flash fp4 at 2048, 4096 and 16384 tokens (past the decode batches' 8192 rows, so 64-token CTAs).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm || exit 1
run_test test_cuda_grouped_gemm STEADYMOE_PER32_WIDE_CTAS=staggered "*Fp4*:*IndexedRows*"
run_test test_cuda_grouped_gemm STEADYMOE_PER32_WIDE_CTAS=two "*Fp4MeetingE4m3*:*IndexedRows*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -E "^=== |CTAs per SM on this GPU" $OUT/t/gpu-tests.log
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-330}
for r in 1 2; do
  bench_run v4-three-$r - --workload deepseek-v4-flash --format fp4 --tokens 2048,4096,16384
  bench_run v4-staggered-$r STEADYMOE_PER32_WIDE_CTAS=staggered \
    --workload deepseek-v4-flash --format fp4 --tokens 2048,4096,16384
  bench_run v4-two-$r STEADYMOE_PER32_WIDE_CTAS=two --workload deepseek-v4-flash --format fp4 --tokens 2048,4096,16384
done
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
