#!/usr/bin/env bash
# Call 1 (s42; commit in $1 plus the working tree: MMA turns for e4m3 rows meeting FP8 weights): the hand-off
# probe under racecheck in all five forms; the grouped GEMM, layer and tensor-core suites with turns (default)
# and the grouped GEMM suite without (STEADYMOE_MMA_TURNS=0); deepseek-v3 fp8 at 16384 tokens, turns against
# none, alternating, twice; and at 1024 tokens once each.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I include -o $OUT/t/probe \
  bench/probes/racecheck_parked_handoff.cu > $OUT/t/probe-build.log 2>&1; echo "probe build rc=$?"
for m in mbarrier named named-drained-sync named-all-sync syncthreads; do
  $OUT/t/probe $m > $OUT/t/probe-$m-plain.log 2>&1; echo "probe $m (no sanitizer): rc=$? $(tail -1 $OUT/t/probe-$m-plain.log)"
  timeout 60 $san --tool racecheck --racecheck-report all $OUT/t/probe $m > $OUT/t/probe-$m.log 2>&1
  echo "racecheck probe $m: rc=$? $(grep -h 'RACECHECK SUMMARY' $OUT/t/probe-$m.log | tail -1); by kind: $(grep -o 'Potential [A-Z]* hazard' $OUT/t/probe-$m.log | sort | uniq -c | tr '\n' ' ')"
done
rm -f $OUT/t/probe
echo "probe done at $((SECONDS-start)) s"
} > $OUT/probe.txt 2>&1
cat $OUT/probe.txt
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_MMA_TURNS=0
run_test test_cuda_layer
run_test test_cuda_tensor_core
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=560
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run v3 - "${v3[@]}"; bench_run v3off STEADYMOE_MMA_TURNS=0 "${v3[@]}"
bench_run v3off2 STEADYMOE_MMA_TURNS=0 "${v3[@]}"; bench_run v3b - "${v3[@]}"
m=(--workload deepseek-v3 --format fp8 --tokens 1024)
bench_run m - "${m[@]}"; bench_run moff STEADYMOE_MMA_TURNS=0 "${m[@]}"
compare_named v3 v3off v3off2 v3b m moff
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
