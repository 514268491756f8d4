#!/usr/bin/env bash
# Call 2 (session 25) at $1 (next/shared-deep): FP8 launches of at most one thin CTA an SM (the shared expert's)
# three to an SM with seven stages (STEADYMOE_FP8_THIN_DEEP=2: two with eleven; 0: seven to an SM as main), and
# the shared expert's down GEMM after the routed gate/up (STEADYMOE_SHARED_DOWN=free: as main). Tests under the
# switches, memcheck; deepseek-v4-flash at 1 and 8 tokens: default, main's (both off), each alone, deeper.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
source bench/device_tests.sh
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_FP8_THIN_DEEP=2 '*FewRow*:*Decode*'
run_test test_cuda_grouped_gemm STEADYMOE_FP8_THIN_DEEP=0 '*FewRow*'
run_test test_cuda_layer
run_test test_cuda_layer "STEADYMOE_SHARED_DOWN=free STEADYMOE_FP8_THIN_DEEP=0"
run_test test_cuda_tensor_core
memcheck test_cuda_grouped_gemm '*FewRow*'
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|SKIPPED" $OUT/t/gpu-tests.log | head -40
grep -h "CTAs per SM on this GPU" $OUT/t/gpu-tests.log | sort | uniq -c
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=480
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
off="STEADYMOE_FP8_THIN_DEEP=0 STEADYMOE_SHARED_DOWN=free"
bench_run v4 - "${v4[@]}"; bench_run v4-off "$off" "${v4[@]}"
bench_run v4-deep-free STEADYMOE_SHARED_DOWN=free "${v4[@]}"; bench_run v4-after STEADYMOE_FP8_THIN_DEEP=0 "${v4[@]}"
bench_run v4-deeper STEADYMOE_FP8_THIN_DEEP=2 "${v4[@]}"
bench_run v4-off-again "$off" "${v4[@]}"; bench_run v4-again - "${v4[@]}"
runs=(); for n in v4 v4-off v4-deep-free v4-after v4-deeper v4-again v4-off-again; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
head -12 $OUT/compare.md
sed -n 1,22p $OUT/traces.md
cd $OUT && tar czf t.tgz t && rm -rf t
