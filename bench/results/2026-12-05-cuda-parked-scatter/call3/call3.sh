#!/usr/bin/env bash
# Call 3 (s37; commit in $1): scatters parked as bf16 by default (block-exact FP4's converted path too): every test
# of the grouped GEMM, the tensor-core suite and the layers by default, the register scatter's (STEADYMOE_PARKED_SCATTER=0)
# epilogue and tensor-core tests, memcheck; then qwen3 bf16 at 1024 and 16384 tokens, deepseek-v3 fp8 and
# deepseek-v4-flash block-exact at 16384, default against STEADYMOE_PARKED_SCATTER=0, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
R="STEADYMOE_PARKED_SCATTER=0" E="STEADYMOE_FP4_BLOCK_EXACT=1"
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_grouped_gemm "$R" '*Bf16Epilogues*'
run_test test_cuda_tensor_core "$R"
memcheck test_cuda_grouped_gemm '*Bf16Epilogues*'
mv $OUT/t/memcheck-test_cuda_grouped_gemm.log $OUT/t/memcheck-epilogues.log
memcheck test_cuda_tensor_core '*fp4_fp8_block_exact*'
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=540
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1024,16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
bench_run q - "${q[@]}"; bench_run qreg "$R" "${q[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3reg "$R" "${v3[@]}"
bench_run v4x "$E" "${v4[@]}"; bench_run v4xreg "$E $R" "${v4[@]}"
bench_run qreg2 "$R" "${q[@]}"; bench_run q2 - "${q[@]}"
bench_run v4xreg2 "$E $R" "${v4[@]}"; bench_run v4x2 "$E" "${v4[@]}"
bench_run v3reg2 "$R" "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
compare_named q qreg qreg2 q2 v3 v3reg v3reg2 v3-2 v4x v4xreg v4xreg2 v4x2
cd $OUT && tar czf t.tgz t && rm -rf t
