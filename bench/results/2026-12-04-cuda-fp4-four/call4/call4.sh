#!/usr/bin/env bash
# Call 4 (session 23) at $1, branch next/early-weights: decode GEMMs whose tiles were final before the kernel before
# them started ask for their first stages' weights before the dependent-launch wait; against
# STEADYMOE_EARLY_WEIGHTS=0 in alternating pairs. Short: the session's last device time.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
run_test() {  # run_test BINARY [KNOB] [FILTER]
  echo "=== $1 ${2:-} ${3:-}" >> $OUT/t/gpu-tests.log
  env ${2:-STEADYMOE_UNSET=1} timeout 100 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=170
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-off STEADYMOE_EARLY_WEIGHTS=0 "${v4[@]}"
bench_run qwen3 - "${q3[@]}"; bench_run qwen3-off STEADYMOE_EARLY_WEIGHTS=0 "${q3[@]}"
bench_run v4-off-again STEADYMOE_EARLY_WEIGHTS=0 "${v4[@]}"; bench_run v4-again - "${v4[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-off STEADYMOE_EARLY_WEIGHTS=0 "${v3[@]}"
runs=(); for n in v4 v4-off v4-again v4-off-again v3 v3-off qwen3 qwen3-off; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cat $OUT/compare.md | head -30
cd $OUT && tar czf t.tgz t && rm -rf t
