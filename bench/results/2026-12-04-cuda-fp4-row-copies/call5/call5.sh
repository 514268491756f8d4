#!/usr/bin/env bash
# Call 5 (session 26) at $1 (next/fp4-wide): FP4 x e4m3 64-token CTAs taking their token rows by tensor copies (rows
# gathered in order by the layer), three to an SM (default) and four warpgroups to a CTA (STEADYMOE_FP4_WIDE_CTAS=quad),
# against main's cp.async rows read in place (STEADYMOE_FP4_ROW_COPIES=0). FP4 grouped-GEMM and layer tests;
# deepseek-v4-flash at 4096 and 16384 tokens.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
source bench/device_tests.sh
run_test test_cuda_grouped_gemm '' '*Fp4*:*Indexed*:*RandomCodes*'
run_test test_cuda_grouped_gemm STEADYMOE_FP4_WIDE_CTAS=quad '*Fp4MeetingE4m3*:*RandomCodes*'
run_test test_cuda_layer
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|CTAs per SM|relative error" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=200
bench_run copies - --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
bench_run in-place STEADYMOE_FP4_ROW_COPIES=0 --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
bench_run quad-copies STEADYMOE_FP4_WIDE_CTAS=quad --workload deepseek-v4-flash --format fp4 --tokens 16384
runs=(); for n in in-place copies quad-copies; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md | head -20
grep -E "^===|^(4096|16384) " $OUT/bench.txt
cd $OUT && tar czf t.tgz t && rm -rf t
