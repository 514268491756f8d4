#!/usr/bin/env bash
# Call 1 for branch next/decode-launches at $1 (main + three changes, each with a switch that undoes it):
#  - decode steps of at most 8 tokens combine in their down GEMMs' last CTAs (STEADYMOE_FUSED_COMBINE=0: the
#    combine kernel);
#  - FP4 decode launches ask for their first weights before the wait (STEADYMOE_EARLY_WEIGHTS=0: none, =all:
#    every format);
#  - a dense launch's grid only the chunks its rows fill (STEADYMOE_DENSE_GRID=full: every chunk).
# Also main's `bench --trace` (kernel by kernel, as served) and main's CLI (bench/tmp-call/s18/main.tar, built
# beside) for an A/B against main in the same call.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/prev
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
grep -i "^CUPTI" build-gpu/CMakeCache.txt
tar -xf bench/tmp-call/s18/main.tar -C /tmp/prev
( cmake -S /tmp/prev -B /tmp/prev/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-prev.log 2>&1 &&
  cmake --build /tmp/prev/b --target steadymoe_cli -j 5 > $OUT/t/build-prev.log 2>&1; echo "main's CLI: rc=$?" > $OUT/t/built-prev.txt ) &
prev_pid=$!
cmake --build build-gpu -j 11 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core test_cli \
  test_kernel_timeline > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$?"
}
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_FUSED_COMBINE=0
run_test test_cuda_layer STEADYMOE_EARLY_WEIGHTS=all
run_test test_cuda_layer STEADYMOE_DENSE_GRID=full
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_EARLY_WEIGHTS=all
run_test test_cuda_tensor_core
run_test test_kernel_timeline
run_test test_cli STEADYMOE_UNSET=1 'CliBench.*:CliVerify.*Gpu*'
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  timeout 120 $san --tool $tool build-gpu/tests/test_cuda_tensor_core --gtest_filter='*GraphReplays*' > $OUT/t/$tool.log 2>&1
  echo "$tool on the tensor-core graph test: rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
  grep "Race reported\|Invalid" $OUT/t/$tool.log | sed 's/(steadymoe::cuda::GroupedGemmLaunch.*//; s/.*unnamed>:://' | sort | uniq -c | head
done
grep -h "combined, during" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
wait $prev_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=520
main_cli=/tmp/prev/b/steadymoe
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8)
bench_run v4 - "${v4[@]}" --trace
BENCH_CLI=$main_cli bench_run v4-main - "${v4[@]}"
bench_run v4-unfused STEADYMOE_FUSED_COMBINE=0 "${v4[@]}"
bench_run v3 - "${v3[@]}" --trace
BENCH_CLI=$main_cli bench_run v3-main - "${v3[@]}"
bench_run qwen3 - "${q3[@]}" --trace
BENCH_CLI=$main_cli bench_run qwen3-main - "${q3[@]}"
bench_run v3-unfused STEADYMOE_FUSED_COMBINE=0 "${v3[@]}"
bench_run v4-early-all STEADYMOE_EARLY_WEIGHTS=all "${v4[@]}"
bench_run v4-full-grid STEADYMOE_DENSE_GRID=full "${v4[@]}"
bench_run v4-again - "${v4[@]}"
BENCH_CLI=$main_cli bench_run v4-main-again - "${v4[@]}"
runs=(); for n in v4 v4-main v4-unfused v4-early-all v4-full-grid v4-again v4-main-again v3 v3-main v3-unfused qwen3 qwen3-main; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
