#!/usr/bin/env bash
# Call 1 (session 22) for branch next/thin-deep at $1: FP8 tiles of at most 8 rows on 8-token CTAs (seven stages
# where the launch has at most a CTA an SM), BF16 launches of at most two CTAs an SM on five-stage CTAs.
# Switches (the old shapes, the same bits): STEADYMOE_FP8_THIN_CTAS=0, STEADYMOE_DEEP_STAGES=0; "off" = both.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core \
  test_cuda_layer > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
grep -h "Li8ELi3\|Li8ELi7\|E0ELb0ELi16ELi2" -A2 $OUT/t/build.log | grep -c registers > /dev/null
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_DEEP_STAGES=0
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_DEEP_STAGES=0
run_test test_cuda_layer STEADYMOE_FP8_THIN_CTAS=0
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 100 $san --tool memcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*FewRowCtas*:*DecodeKernelPartial*' > $OUT/t/memcheck.log 2>&1
echo "memcheck on the few-row and partial-tile tests: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
timeout 100 $san --tool memcheck build-gpu/tests/test_cuda_layer --gtest_filter='CudaGolden.*' > $OUT/t/memcheck-layer.log 2>&1
echo "memcheck on the golden layers (FP8 shared experts): rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck-layer.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|CTAs per SM" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=540
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256 --trace)
off() { ( export STEADYMOE_DEEP_STAGES=0; bench_run "$@" ); }
bench_run qwen3 - "${q3[@]}"
bench_run qwen3-off STEADYMOE_DEEP_STAGES=0 "${q3[@]}"
bench_run v4 - "${v4[@]}"
off v4-off STEADYMOE_FP8_THIN_CTAS=0 "${v4[@]}"
bench_run v4-shallow STEADYMOE_DEEP_STAGES=0 "${v4[@]}"
bench_run v3 - "${v3[@]}"
off v3-off STEADYMOE_FP8_THIN_CTAS=0 "${v3[@]}"
bench_run qwen3-again - "${q3[@]}"
bench_run qwen3-off-again STEADYMOE_DEEP_STAGES=0 "${q3[@]}"
off v4-off-again STEADYMOE_FP8_THIN_CTAS=0 "${v4[@]}"
bench_run v4-again - "${v4[@]}"
off v3-off-again STEADYMOE_FP8_THIN_CTAS=0 "${v3[@]}"
bench_run v3-again - "${v3[@]}"
runs=(); for n in v4 v4-off v4-shallow v4-again v4-off-again v3 v3-off v3-again v3-off-again qwen3 qwen3-off qwen3-again qwen3-off-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
