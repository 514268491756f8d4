#!/usr/bin/env bash
# Call 1 (session 46) at $1 plus release-before-fold.patch (scaled tiled GEMMs release a block's stage by an
# elect.sync-predicated arrive right after its MMA wait, then fold). Tests with the patch (grouped GEMM, layer,
# tensor core); the base (without it) built beside; then the prefill GEMMs at 16384 tokens, patched against base,
# alternating: deepseek-v3 fp8 (two pairs), deepseek-v4-flash fp8, fp4, and fp4 block-exact. First, the probe
# bench/probes/racecheck_copy_kinds.cu under racecheck in its five modes and bench/probes/wgmma_operand_rate.cu; last, if time is left, racecheck on
# small grouped-GEMM tests.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/tmp-call/s49/release-before-fold.patch
patch -s -p1 < $P || { echo 'the patch does not apply'; exit 1; }
source bench/device_tests.sh
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -o probe_kinds bench/probes/racecheck_copy_kinds.cu 2>&1 | tail -5
for m in 0 1 2 3 4; do
  timeout 60 $SAN --tool racecheck ./probe_kinds $m > $OUT/t/probe-$m.log 2>&1
  echo "mode $m: rc=$? $(grep -h 'probe mode' $OUT/t/probe-$m.log) | $(grep -h 'RACECHECK SUMMARY' $OUT/t/probe-$m.log)"
done
nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -o wgmma_rate bench/probes/wgmma_operand_rate.cu 2>&1 | tail -5
timeout 60 ./wgmma_rate
echo "probes done at $((SECONDS-start)) s"
} > $OUT/probe.txt 2>&1
cat $OUT/probe.txt
{
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
grep -c "C7514\|C7512\|bytes spill" $OUT/t/build.log
build_base $P steadymoe_cli || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_grouped_gemm STEADYMOE_FP4_BLOCK_EXACT=1 '*Fp4*:*BlockExact*'
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=500
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v48=(--workload deepseek-v4-flash --format fp8 --tokens 16384)
v44=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
B=./build-base/steadymoe
bench_run v3new - "${v3[@]}"
BENCH_CLI=$B bench_run v3base - "${v3[@]}"
bench_run v48new - "${v48[@]}"
BENCH_CLI=$B bench_run v48base - "${v48[@]}"
bench_run v44new - "${v44[@]}"
BENCH_CLI=$B bench_run v44base - "${v44[@]}"
bench_run v4xnew STEADYMOE_FP4_BLOCK_EXACT=1 "${v44[@]}"
BENCH_CLI=$B bench_run v4xbase STEADYMOE_FP4_BLOCK_EXACT=1 "${v44[@]}"
BENCH_CLI=$B bench_run v3base2 - "${v3[@]}"
bench_run v3new2 - "${v3[@]}"
compare_named v3new v3base v3base2 v3new2 > /dev/null; cp $OUT/stages.md $OUT/stages-v3.md; cp $OUT/compare.md $OUT/compare-v3.md
compare_named v48new v48base v44new v44base v4xnew v4xbase > /dev/null; cp $OUT/stages.md $OUT/stages-v4.md; cp $OUT/compare.md $OUT/compare-v4.md
rm -f $OUT/stages.md $OUT/compare.md
cat $OUT/stages-v3.md $OUT/stages-v4.md
if (( SECONDS - start < 520 )); then
  timeout $((570 - (SECONDS - start))) $SAN --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp8*:*Fp4*' > $OUT/t/racecheck-gg.log 2>&1
  echo "racecheck on grouped-GEMM FP8/FP4 tests: rc=$? $(grep -h 'RACECHECK SUMMARY' $OUT/t/racecheck-gg.log | tail -1)"
  grep -h "^\[  \|Race reported\|hazard" $OUT/t/racecheck-gg.log | sort | uniq -c | sort -rn | head -20
fi
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
