#!/usr/bin/env bash
# Call 2: decode CTAs start their weights' copies before waiting for the kernel before them (the down GEMM;
# the gate/up GEMM after a gather), the gate/up GEMM letting the down GEMM start at once. One build, switched
# off by STEADYMOE_EARLY_WEIGHTS=0 (the same bits). Tests (the layer, tensor_core's graphs and invariance, both
# ways), then decode batches: qwen3 bf16, deepseek-v4-flash fp4 and deepseek-v3 fp8, on and off, with traces.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_layer test_cuda_tensor_core test_cuda_grouped_gemm test_cuda_gathers test_cli || exit 1
for t in test_cuda_layer test_cuda_tensor_core test_cuda_grouped_gemm test_cuda_gathers; do run_test $t; done
run_test test_cuda_layer STEADYMOE_EARLY_WEIGHTS=0
run_test test_cuda_tensor_core STEADYMOE_EARLY_WEIGHTS=0 '*Graph*:*Bitwise*:*Invarian*'
run_test test_cli
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=480
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,64,256 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,128 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8,128 --trace)
off=STEADYMOE_EARLY_WEIGHTS=0
bench_run q3-on - "${q3[@]}"; bench_run q3-off $off "${q3[@]}"
bench_run q3-off2 $off "${q3[@]}"; bench_run q3-on2 - "${q3[@]}"
bench_run v4-on - "${v4[@]}"; bench_run v4-off $off "${v4[@]}"
bench_run v3-on - "${v3[@]}"; bench_run v3-off $off "${v3[@]}"
compare_named q3-off q3-on q3-off2 q3-on2 v4-off v4-on v3-off v3-on
runs=(); for n in q3-off q3-on v4-off v4-on v3-off v3-on; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
grep -E "grouped|decode|span" $OUT/traces.md | head -40
cd $OUT && tar czf t.tgz t && rm -rf t
