#!/usr/bin/env bash
# Call 2 (session 26) at $1 (next/fp4-wide): FP4 x e4m3 64-token CTAs (other than decode batches): main's three to
# an SM (default), one to an SM of four warpgroups sharing the tokens (STEADYMOE_FP4_WIDE_CTAS=quad), of two
# (=shared, call 1's with its warpgroup index fixed). Grouped-GEMM and layer tests under each, memcheck under quad;
# deepseek-v4-flash at 4096 and 16384 tokens under each, quad and three alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
source bench/device_tests.sh
run_test test_cuda_grouped_gemm STEADYMOE_FP4_WIDE_CTAS=quad
run_test test_cuda_grouped_gemm STEADYMOE_FP4_WIDE_CTAS=shared '*Fp4*:*Indexed*:*RandomCodes*'
run_test test_cuda_grouped_gemm '' '*Fp4*:*Indexed*:*RandomCodes*'
run_test test_cuda_layer STEADYMOE_FP4_WIDE_CTAS=quad
run_test test_cuda_layer STEADYMOE_FP4_WIDE_CTAS=shared
STEADYMOE_FP4_WIDE_CTAS=quad memcheck test_cuda_grouped_gemm '*Fp4MeetingE4m3*:*RandomCodes*'
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|SKIPPED|CTAs per SM|relative error" $OUT/t/gpu-tests.log | head -50
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
v4=(--workload deepseek-v4-flash --format fp4 --tokens 4096,16384)
bench_run quad STEADYMOE_FP4_WIDE_CTAS=quad "${v4[@]}"
bench_run three - "${v4[@]}"
bench_run shared STEADYMOE_FP4_WIDE_CTAS=shared "${v4[@]}"
bench_run quad-again STEADYMOE_FP4_WIDE_CTAS=quad "${v4[@]}"
bench_run three-again - "${v4[@]}"
runs=(); for n in three quad shared three-again quad-again; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md | head -30
grep -E "^(4096|16384) " $OUT/bench.txt
cd $OUT && tar czf t.tgz t && rm -rf t
