#!/usr/bin/env bash
# Call 1 for branch next/deep-few-ctas, at $1 (three changes, each with a switch that undoes it at run time):
#  - BF16 and FP8 decode launches of no more CTAs than SMs (router GEMM, shared expert) on deeper-staged shapes
#    (STEADYMOE_DEEP_FEW_CTAS=0: the old shapes);
#  - decode CTAs ask for their first stages' weights before waiting for the kernel before them
#    (STEADYMOE_EARLY_WEIGHTS=0: wait first);
#  - bench: an `experts µs` column (routed + shared experts alone, untimed) and `untimed/experts`.
# Also main's CLI (bench/tmp-call/s16/main.tar, built beside) for an A/B against the code before the branch.
# Tests: grouped GEMM (default and under each switch), layer, tensor core; memcheck and racecheck on the new tests.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/prev
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
tar -xf bench/tmp-call/s16/main.tar -C /tmp/prev
( cmake -S /tmp/prev -B /tmp/prev/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-prev.log 2>&1 &&
  cmake --build /tmp/prev/b --target steadymoe_cli -j 5 > $OUT/t/build-prev.log 2>&1; echo "main's CLI: rc=$?" > $OUT/t/built-prev.txt ) &
prev_pid=$!
cmake --build build-gpu -j 11 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core \
  > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core; do
  echo "=== $t" >> $OUT/t/gpu-tests.log
  timeout 150 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; echo "$t: rc=$?"
done
for knob in STEADYMOE_DEEP_FEW_CTAS=0 STEADYMOE_EARLY_WEIGHTS=0; do
  echo "=== test_cuda_grouped_gemm ($knob)" >> $OUT/t/gpu-tests.log
  env $knob timeout 150 build-gpu/tests/test_cuda_grouped_gemm >> $OUT/t/gpu-tests.log 2>&1; echo "test_cuda_grouped_gemm with $knob: rc=$?"
done
echo "=== test_cuda_layer (STEADYMOE_EARLY_WEIGHTS=0)" >> $OUT/t/gpu-tests.log
STEADYMOE_EARLY_WEIGHTS=0 timeout 150 build-gpu/tests/test_cuda_layer >> $OUT/t/gpu-tests.log 2>&1; echo "test_cuda_layer with STEADYMOE_EARLY_WEIGHTS=0: rc=$?"
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  timeout 100 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
    --gtest_filter='*DeepShapes*:*WeightsAsked*' > $OUT/t/$tool.log 2>&1
  echo "$tool of the new tests: rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
grep -h "deep decode shapes\|CTAs per SM on this GPU" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^===|^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -40
wait $prev_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=500
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,256
BENCH_CLI=/tmp/prev/b/steadymoe bench_run v4-main - --workload deepseek-v4-flash --format fp4 --tokens 1,8,256
bench_run v4-shallow STEADYMOE_DEEP_FEW_CTAS=0 --workload deepseek-v4-flash --format fp4 --tokens 1,8
bench_run v4-wait STEADYMOE_EARLY_WEIGHTS=0 --workload deepseek-v4-flash --format fp4 --tokens 1,8
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8
BENCH_CLI=/tmp/prev/b/steadymoe bench_run v3-main - --workload deepseek-v3 --format fp8 --tokens 1,8
bench_run qwen3 - --workload qwen3-30b-a3b --format bf16 --tokens 1,8
BENCH_CLI=/tmp/prev/b/steadymoe bench_run qwen3-main - --workload qwen3-30b-a3b --format bf16 --tokens 1,8
bench_run v4-again - --workload deepseek-v4-flash --format fp4 --tokens 1,8
BENCH_CLI=/tmp/prev/b/steadymoe bench_run v4-main-again - --workload deepseek-v4-flash --format fp4 --tokens 1,8
runs=(); for n in v4 v4-main v4-shallow v4-wait v4-again v4-main-again v3 v3-main qwen3 qwen3-main; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
