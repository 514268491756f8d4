#!/usr/bin/env bash
# Call 3 (s31): tokens quantised straight into their pairs' rows (launch_quantise_to_pairs) against quantise once
# + copy codes (STEADYMOE_QUANTISE_TO_PAIRS=0, the same build): tests both ways, memcheck, deepseek-v3 and v4.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_gathers test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_gathers test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_layer STEADYMOE_QUANTISE_TO_PAIRS=0
run_test test_cuda_tensor_core STEADYMOE_QUANTISE_TO_PAIRS=0 '*Graph*:*Bitwise*:*Invarian*'
memcheck test_cuda_gathers '*Pairs*'
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
v3=(--workload deepseek-v3 --format fp8 --tokens 1,16384 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,16384 --trace)
old=STEADYMOE_QUANTISE_TO_PAIRS=0
bench_run v3 - "${v3[@]}"; bench_run v3-copy $old "${v3[@]}"
bench_run v4 - "${v4[@]}"; bench_run v4-copy $old "${v4[@]}"
bench_run v3-2 - "${v3[@]}"; bench_run v3-copy2 $old "${v3[@]}"
compare_named v3 v3-copy v3-2 v3-copy2 v4 v4-copy
for set in "v3 v3-copy v3-2 v3-copy2" "v4 v4-copy"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
