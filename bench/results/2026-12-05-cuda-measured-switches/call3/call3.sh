#!/usr/bin/env bash
# Call 3 (s39; commit in $1): parked SwiGLU outputs by default for bf16 rows meeting bf16 weights: the grouped
# GEMM, tensor-core and layer suites by default (so with them) and the grouped GEMM's epilogue tests with the
# register epilogue (STEADYMOE_PARKED_SWIGLU=0); qwen3 bf16 at 1024 and 16384 tokens, default against =0, twice.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core "" "*bf16*:*Bf16*"
run_test test_cuda_layer
run_test test_cuda_grouped_gemm STEADYMOE_PARKED_SWIGLU=0 '*Bf16Epilogues*:*PersistentSwiGlus*:*EveryTiledSchedule*'
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=280
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1024,16384)
bench_run q - "${q[@]}"; bench_run qreg STEADYMOE_PARKED_SWIGLU=0 "${q[@]}"
bench_run qreg2 STEADYMOE_PARKED_SWIGLU=0 "${q[@]}"; bench_run q2 - "${q[@]}"
compare_named q qreg qreg2 q2
cd $OUT && tar czf t.tgz t && rm -rf t
