#!/usr/bin/env bash
# Call 6 at $1 (call 4 again after the fix, fewer runs): block-major row scales (the tiled kernel's row
# scales by one tensor copy a stage). Tests (gathers, grouped GEMM, layer, tensor core; memcheck on the new
# grouped GEMM test), then at 16384 tokens, alternating, the default against STEADYMOE_BLOCK_MAJOR_SCALES=0
# (row-major scales, 4-byte copies): deepseek-v3 fp8 with the shared expert after (two pairs), block-exact
# deepseek-v4-flash fp4 (one pair).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_gathers test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
grep -c "C7514\|C7512\|C7510\|bytes spill" $OUT/t/build.log
run_test test_cuda_gathers
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
memcheck test_cuda_grouped_gemm '*BlockMajor*'
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=330
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp4 --tokens 16384"
A=STEADYMOE_SHARED_FORK=after
bench_run v3-new $A $v3
bench_run v3-old "$A STEADYMOE_BLOCK_MAJOR_SCALES=0" $v3
bench_run v3-old2 "$A STEADYMOE_BLOCK_MAJOR_SCALES=0" $v3
bench_run v3-new2 $A $v3
bench_run v4x-new "$A STEADYMOE_FP4_BLOCK_EXACT=1" $v4
bench_run v4x-old "$A STEADYMOE_FP4_BLOCK_EXACT=1 STEADYMOE_BLOCK_MAJOR_SCALES=0" $v4
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
