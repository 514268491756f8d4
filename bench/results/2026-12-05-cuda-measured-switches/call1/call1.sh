#!/usr/bin/env bash
# Call 1 (s39; commit in $1): the session's unrun code. Default: the grouped GEMM, gathers, tensor-core and
# layer suites whole (the fixed PersistentScatters test, the new PersistentSwiGlus, QuantisedByTheirLaunch and
# bf16-against-f32 gather tests, the bf16 SwiGLU outputs between the GEMMs in every FP8 / FP4 layer). Parked SwiGLU
# outputs (STEADYMOE_PARKED_SWIGLU=1) quantised in the epilogue (STEADYMOE_SWIGLU_E4M3=1) and scatters parked in
# the item's last stage (STEADYMOE_PARK_IN_STAGE=1): the epilogue tests paired, unpaired and by cp.async, the
# tensor-core suite and the layers with all three; memcheck and racecheck on the persistent tests with them. Then
# deepseek-v3 fp8 at 16384 tokens: the default, all three, each alone (the E4M3 one with parked SwiGLU), twice
# round as far as the time goes; each run's setup lines (timed) printed from its log.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
B="STEADYMOE_PARKED_SWIGLU=1 STEADYMOE_PARK_IN_STAGE=1 STEADYMOE_SWIGLU_E4M3=1"
F='*Bf16Epilogues*:*PersistentSwiGlus*:*PersistentScatters*:*QuantisedByTheirLaunch*'
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core test_cuda_gathers || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_gathers
run_test test_cuda_tensor_core
run_test test_cuda_layer
run_test test_cuda_grouped_gemm "$B" "$F"
run_test test_cuda_grouped_gemm "$B STEADYMOE_PAIRED_CTAS=0" "$F"
run_test test_cuda_grouped_gemm "$B STEADYMOE_ROW_TENSOR_COPIES=0" "$F"
run_test test_cuda_tensor_core "$B"
run_test test_cuda_layer "$B"
export STEADYMOE_PARKED_SWIGLU=1 STEADYMOE_PARK_IN_STAGE=1 STEADYMOE_SWIGLU_E4M3=1
memcheck test_cuda_grouped_gemm '*PersistentSwiGlus*:*PersistentScatters*:*QuantisedByTheirLaunch*'
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 120 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*QuantisedByTheirLaunch*:*PersistentScatters*' \
  > $OUT/t/racecheck.log 2>&1; echo "racecheck: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck.log | tail -1)"
unset STEADYMOE_PARKED_SWIGLU STEADYMOE_PARK_IN_STAGE STEADYMOE_SWIGLU_E4M3
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=500
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
P="STEADYMOE_PARKED_SWIGLU=1" I="STEADYMOE_PARK_IN_STAGE=1" Q="STEADYMOE_PARKED_SWIGLU=1 STEADYMOE_SWIGLU_E4M3=1"
bench_run v3 - "${v3[@]}"; bench_run v3all "$B" "${v3[@]}"; bench_run v3sw "$P" "${v3[@]}"; bench_run v3in "$I" "${v3[@]}"
bench_run v3swq "$Q" "${v3[@]}"; bench_run v3-2 - "${v3[@]}"; bench_run v3all2 "$B" "${v3[@]}"; bench_run v3sw2 "$P" "${v3[@]}"
bench_run v3in2 "$I" "${v3[@]}"; bench_run v3swq2 "$Q" "${v3[@]}"
compare_named v3 v3all v3sw v3in v3swq v3-2 v3all2 v3sw2 v3in2 v3swq2  # (runs past the budget are skipped)
for f in $OUT/t/v3*.log; do echo "== $f"; grep "^\[bench" $f | head -12; done
cd $OUT && tar czf t.tgz t && rm -rf t
