#!/usr/bin/env bash
# Call 1 (session 26) at $1 (next/fp4-wide): FP4 x e4m3 64-token CTAs (other than decode batches) one to an SM
# with two warpgroups sharing the tokens (default), two to an SM (STEADYMOE_FP4_WIDE_CTAS=two), or main's three
# (=three); a block's four MMAs at once in the first two. Grouped-GEMM tests under each, layer tests, memcheck
# and racecheck on the FP4 x e4m3 test; deepseek-v4-flash at 4096 and 16384 tokens under each.
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
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_FP4_WIDE_CTAS=two '*Fp4*:*Indexed*'
run_test test_cuda_grouped_gemm STEADYMOE_FP4_WIDE_CTAS=three '*Fp4*:*Indexed*'
run_test test_cuda_layer
memcheck test_cuda_grouped_gemm '*Fp4MeetingE4m3*'
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 120 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4MeetingE4m3*' > $OUT/t/racecheck.log 2>&1
echo "racecheck on Fp4MeetingE4m3: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|SKIPPED|CTAs per SM|relative error" $OUT/t/gpu-tests.log | head -50
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
v4=(--workload deepseek-v4-flash --format fp4 --tokens 4096,16384)
bench_run shared - "${v4[@]}"
bench_run three STEADYMOE_FP4_WIDE_CTAS=three "${v4[@]}"
bench_run two STEADYMOE_FP4_WIDE_CTAS=two --workload deepseek-v4-flash --format fp4 --tokens 16384
runs=(); for n in shared three two; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cat $OUT/compare.md | head -30
cat $OUT/bench.txt | head -60
cd $OUT && tar czf t.tgz t && rm -rf t
