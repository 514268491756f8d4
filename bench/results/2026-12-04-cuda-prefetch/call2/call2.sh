#!/usr/bin/env bash
# Call 2 (session 24) at $1: decode GEMMs whose tiles were final before the kernel before them started read them,
# set up their barriers and zero their padding before the dependent-launch wait (default, "tiles"); "weights" also
# asks for the first stages' weights there (the previous session's call 4); "nothing" is main. Tests both ways, then
# deepseek-v4-flash at 1 and 8 tokens in alternating triples; qwen3 (1, 8) and deepseek-v3 (1) tiles / nothing.
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
  env ${2:-STEADYMOE_UNSET=1} timeout 150 build-gpu/tests/$1 ${3:+--gtest_filter=$3} >> $OUT/t/gpu-tests.log 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' $OUT/t/gpu-tests.log) OK so far"
}
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_BEFORE_WAIT=weights
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_BEFORE_WAIT=weights
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 80 $san --tool memcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4MeetingE4m3*' > $OUT/t/memcheck.log 2>&1
echo "memcheck on the FP4 x e4m3 test: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-nothing STEADYMOE_BEFORE_WAIT=nothing "${v4[@]}"
bench_run v4-weights STEADYMOE_BEFORE_WAIT=weights "${v4[@]}"
bench_run v4-nothing-again STEADYMOE_BEFORE_WAIT=nothing "${v4[@]}"; bench_run v4-weights-again STEADYMOE_BEFORE_WAIT=weights "${v4[@]}"
bench_run v4-again - "${v4[@]}"
bench_run qwen3 - "${q3[@]}"; bench_run qwen3-nothing STEADYMOE_BEFORE_WAIT=nothing "${q3[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-nothing STEADYMOE_BEFORE_WAIT=nothing "${v3[@]}"
runs=(); for n in v4 v4-nothing v4-weights v4-again v4-nothing-again v4-weights-again qwen3 qwen3-nothing v3 v3-nothing; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
cat $OUT/compare.md | head -60
cd $OUT && tar czf t.tgz t && rm -rf t
