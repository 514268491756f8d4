#!/usr/bin/env bash
# Call 2 (session 23) at $1: FP4 x e4m3 8-token CTAs four to an SM (four stages, a stage's eight MMAs in flight)
# for launches of at most three CTAs an SM, against STEADYMOE_DEEP_STAGES=0 (six to an SM); and
# every thin launch four to an SM (STEADYMOE_FP4_THIN_CTAS_PER_SM=4).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core \
  test_cuda_layer > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_DEEP_STAGES=0
run_test test_cuda_grouped_gemm STEADYMOE_FP4_THIN_CTAS_PER_SM=4
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_DEEP_STAGES=0
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 100 $san --tool memcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4MeetingE4m3*' > $OUT/t/memcheck.log 2>&1
echo "memcheck on the FP4 x e4m3 test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|CTAs per SM" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=540
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-off STEADYMOE_DEEP_STAGES=0 "${v4[@]}"; bench_run v4-four STEADYMOE_FP4_THIN_CTAS_PER_SM=4 "${v4[@]}"
bench_run v4-off-again STEADYMOE_DEEP_STAGES=0 "${v4[@]}"; bench_run v4-again - "${v4[@]}"; bench_run v4-four-again STEADYMOE_FP4_THIN_CTAS_PER_SM=4 "${v4[@]}"
runs=(); for n in v4 v4-off v4-four v4-again v4-off-again v4-four-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cat $OUT/compare.md | head -60
cd $OUT && tar czf t.tgz t && rm -rf t
