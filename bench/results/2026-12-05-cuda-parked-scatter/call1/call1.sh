#!/usr/bin/env bash
# Call 1 (s37; commit in $1): persistent CTAs in clusters of four (STEADYMOE_QUAD_CTAS=1), scatters parked as bf16
# (STEADYMOE_PARKED_SCATTER=1) and wide CTAs for the down GEMMs only (STEADYMOE_WIDE_CTAS=down): their tests (as
# ctest's switched entries run them), memcheck on the cluster and epilogue tests; then runs at 16384 tokens of
# qwen3 bf16 and deepseek-v3 fp8 under each switch, alternating with the default.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
Q="STEADYMOE_QUAD_CTAS=1" P="STEADYMOE_PARKED_SCATTER=1" D="STEADYMOE_WIDE_CTAS=down"
F='*EveryTiledSchedule*:*Bf16Epilogues*:*ClusteredCtas*'
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm "" "$F"
run_test test_cuda_grouped_gemm "$Q" "$F"
run_test test_cuda_grouped_gemm "$P" '*Bf16Epilogues*'
STEADYMOE_QUAD_CTAS=1 memcheck test_cuda_grouped_gemm '*ClusteredCtas*'
mv $OUT/t/memcheck-test_cuda_grouped_gemm.log $OUT/t/memcheck-quads.log
STEADYMOE_PARKED_SCATTER=1 STEADYMOE_QUAD_CTAS=1 memcheck test_cuda_grouped_gemm '*Bf16Epilogues*'
run_test test_cuda_tensor_core "$Q"
run_test test_cuda_layer "$Q"
run_test test_cuda_tensor_core "$P"
run_test test_cuda_layer "$P"
run_test test_cuda_tensor_core "$D" '*/bf16'
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=545
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run q - "${q[@]}"; bench_run qquad "$Q" "${q[@]}"; bench_run qpark "$P" "${q[@]}"; bench_run qdown "$D" "${q[@]}"
bench_run qboth "$Q $P" "${q[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3quad "$Q" "${v3[@]}"; bench_run v3park "$P" "${v3[@]}"; bench_run v3both "$Q $P" "${v3[@]}"
bench_run qboth2 "$Q $P" "${q[@]}"; bench_run qdown2 "$D" "${q[@]}"; bench_run qpark2 "$P" "${q[@]}"; bench_run qquad2 "$Q" "${q[@]}"
bench_run q2 - "${q[@]}"
bench_run v3both2 "$Q $P" "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
compare_named q qquad qpark qdown qboth q2 qquad2 qpark2 qdown2 qboth2 v3 v3quad v3park v3both v3both2 v3-2
cd $OUT && tar czf t.tgz t && rm -rf t
