#!/usr/bin/env bash
# Call 1 (s31): e4m3 rows quantised by the row kernel (quantise_rows_kernel; STEADYMOE_QUANTISE_ROWS=group
# runs the old per-group gather, the same bytes), and the switches STEADYMOE_SHARED_FORK=after and
# STEADYMOE_E4M3_ROW_COPY=warp: tests, memcheck on the new kernel, deepseek-v3 and v4 at 16384 tokens traced.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_gathers test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_gathers test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_gathers STEADYMOE_E4M3_ROW_COPY=warp
run_test test_cuda_layer STEADYMOE_SHARED_FORK=after
run_test test_cuda_tensor_core STEADYMOE_SHARED_FORK=after '*Graph*:*Bitwise*:*Invarian*'
run_test test_cuda_layer STEADYMOE_QUANTISE_ROWS=group
memcheck test_cuda_gathers '*Quantised*:*Quantising*'
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=530
v3=(--workload deepseek-v3 --format fp8 --tokens 1,16384 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,16384 --trace)
group=STEADYMOE_QUANTISE_ROWS=group warp=STEADYMOE_E4M3_ROW_COPY=warp after=STEADYMOE_SHARED_FORK=after
bench_run v3 - "${v3[@]}"; bench_run v3-group $group "${v3[@]}"
bench_run v3-after $after "${v3[@]}"; bench_run v3-both "$warp $after" "${v3[@]}"
bench_run v4 - "${v4[@]}"; bench_run v4-group $group "${v4[@]}"
bench_run v3-warp $warp "${v3[@]}"
compare_named v3 v3-group v3-after v3-both v3-warp v4 v4-group
for set in "v3 v3-group v3-after v3-both v3-warp" "v4 v4-group"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
