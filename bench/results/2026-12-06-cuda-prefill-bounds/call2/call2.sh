#!/usr/bin/env bash
# Call 2 (session 45) at $1 (4ebade4: scaled tiled GEMMs release a block's stage before its fold) plus probe7.patch
# (STEADYMOE_PROBE=7: e4m3 warpgroups take turns at the tensor pipe by MMA completion; off by default). Tests of the
# release change; the same tests' grouped-GEMM suite with turns; then deepseek-v3 fp8 and deepseek-v4-flash fp8 at
# 16384 tokens with and without turns, alternating (no base build: the device time was short; call 1's STEADYMOE_PROBE=4 runs are the release change's A/B).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
patch -s -p1 < bench/tmp-call/s48/probe7.patch || { echo 'probe7.patch does not apply'; exit 1; }
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
echo "=== turns" >> $OUT/t/gpu-tests.log
STEADYMOE_PROBE=7 timeout 60 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp8*:*ParkedFp8*:*RandomCodes*:*Clustered*:*WeightPairsTake*:*PersistentScatters*:*PersistentSwiGlus*:*IndexedRows*' >> $OUT/t/gpu-tests.log 2>&1
turns_rc=$?; echo "grouped-GEMM suite with turns: rc=$turns_rc"
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
git diff --stat 2>/dev/null | tail -1
echo "tests done at $((SECONDS-start)) s"
echo $turns_rc > $OUT/t/turns_rc
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
turns_rc=$(cat $OUT/t/turns_rc 2>/dev/null || echo 1)
source bench/bench_runs.sh
BENCH_BUDGET_S=290
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v4e=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
v48=(--workload deepseek-v4-flash --format fp8 --tokens 16384)
bench_run v3new - "${v3[@]}"
(( turns_rc == 0 )) && bench_run v3turns STEADYMOE_PROBE=7 "${v3[@]}"
bench_run v3new2 - "${v3[@]}"
(( turns_rc == 0 )) && bench_run v3turns2 STEADYMOE_PROBE=7 "${v3[@]}"
bench_run v48new - "${v48[@]}"
(( turns_rc == 0 )) && bench_run v48turns STEADYMOE_PROBE=7 "${v48[@]}"
compare_named v3new v3turns v3new2 v3turns2 v48new v48turns > /dev/null
cat $OUT/stages.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
