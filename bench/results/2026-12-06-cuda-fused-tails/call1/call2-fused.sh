#!/usr/bin/env bash
# Call 2 (commit in $1): in decode batches, the layer's combine done by the down GEMMs' last CTAs
# (STEADYMOE_FUSED_COMBINE=0 keeps the combine kernel) and the SwiGLU outputs quantised by the gate/up GEMMs' last
# CTAs (STEADYMOE_FUSED_QUANTISE=0 keeps the quantising gather). Tests: the new test first (hang guard), then
# test_cuda_tensor_core whole, the new test with each switch off and both; test_cuda_layer; memcheck and initcheck on the new test. Bench at 1 and 8 tokens: qwen3 bf16
# (combine only) default / combine off, twice; deepseek-v3 fp8 and deepseek-v4-flash fp4 default / combine off /
# quantise off / both off / default.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
source bench/device_tests.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt 2>&1
C=STEADYMOE_FUSED_COMBINE=0 Q=STEADYMOE_FUSED_QUANTISE=0
F='*DecodeGemmsCombine*'
{
build_gpu steadymoe_cli test_cuda_tensor_core test_cuda_layer || exit 1
timeout 150 build-gpu/tests/test_cuda_tensor_core --gtest_filter="$F" > $OUT/t/first.log 2>&1
rc=$?; echo "new test: rc=$rc $(grep -c '^\[       OK' $OUT/t/first.log) OK"; grep -E "FAILED|Failure|Expected|Which is|launches|run [0-9]" $OUT/t/first.log | head -30
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_tensor_core "$C" "$F"
run_test test_cuda_tensor_core "$Q" "$F"
run_test test_cuda_tensor_core "$C $Q" "$F"
grep -E "launches" $OUT/t/gpu-tests.log | head -20
run_test test_cuda_tensor_core
run_test test_cuda_layer
grep -E "^\[  FAILED|Failure" $OUT/t/gpu-tests.log | head -20
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck initcheck; do
  timeout 150 $san --tool $tool build-gpu/tests/test_cuda_tensor_core --gtest_filter="$F/fp4_fp8:$F/fp8:$F/bf16" > $OUT/t/$tool.log 2>&1
  echo "$tool: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/$tool.log | tail -1)"
done
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/gpu.txt $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=430
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8)
bench_run q - "${q[@]}"; bench_run qC $C "${q[@]}"; bench_run qC2 $C "${q[@]}"; bench_run q2 - "${q[@]}"
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8)
for w in v4 v3; do
  eval "a=(\"\${$w[@]}\")"
  bench_run $w - "${a[@]}"; bench_run ${w}C $C "${a[@]}"; bench_run ${w}Q $Q "${a[@]}"
  bench_run ${w}CQ "$C $Q" "${a[@]}"; bench_run ${w}2 - "${a[@]}"
done
compare_named q qC qC2 q2 v4 v4C v4Q v4CQ v42 v3 v3C v3Q v3CQ v32 > /dev/null
cat $OUT/compare.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
