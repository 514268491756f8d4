#!/usr/bin/env bash
# Call 1: the row-copy gathers (472e16b) against main before them (2c9310d, change.patch taken back): GPU tests
# (the gathers' new file, the layer, grouped_gemm, tensor_core), memcheck on the gathers, then qwen3 bf16 (bf16
# rows copied), deepseek-v3 fp8 and deepseek-v4-flash fp4 (e4m3 codes copied) new against main; qwen3 under
# two knobs whose verdicts predate the cheap scatter.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_gathers test_cuda_layer test_cuda_grouped_gemm test_cuda_tensor_core || exit 1
for t in test_cuda_gathers test_cuda_layer test_cuda_grouped_gemm test_cuda_tensor_core; do run_test $t; done
memcheck test_cuda_gathers
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x" $OUT/t/gpu-tests.log | head -20
build_base bench/tmp-call/s30/change.patch steadymoe_cli
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=500
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,4096,16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
bench_run q3-new - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-main - "${q3[@]}"
bench_run q3-new2 - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-main2 - "${q3[@]}"
bench_run v3-new - "${v3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run v3-main - "${v3[@]}"
bench_run v4-new - "${v4[@]}"; BENCH_CLI=./build-base/steadymoe bench_run v4-main - "${v4[@]}"
bench_run q3-parked STEADYMOE_PARKED_EPILOGUES=1 "${q3[@]}"
bench_run q3-unpaired STEADYMOE_PAIRED_CTAS=0 "${q3[@]}"
compare_named q3-main q3-new q3-main2 q3-new2 q3-parked q3-unpaired v3-main v3-new v4-main v4-new
cd $OUT && tar czf t.tgz t && rm -rf t
