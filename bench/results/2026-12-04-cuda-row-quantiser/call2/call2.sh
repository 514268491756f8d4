#!/usr/bin/env bash
# Call 2 (s31): the row quantiser reworked (branch-free NaN codes, fmaxf maxima, four words a lane, one for
# batches under 512 rows): tests (gathers, the exhaustive e4m3 conversion, layer, tensor_core), memcheck,
# deepseek-v3 and v4 at 1, 8 and 16384 tokens against STEADYMOE_QUANTISE_ROWS=group (the same build).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_gathers test_cuda_codecs test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_gathers
run_test test_cuda_codecs "" '*E4m3*'
run_test test_cuda_layer
run_test test_cuda_tensor_core
memcheck test_cuda_gathers '*RowsQuantised*:*AsOnTheCpu*:*Quantising*'
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=480
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8,16384 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,16384 --trace)
group=STEADYMOE_QUANTISE_ROWS=group
bench_run v3 - "${v3[@]}"; bench_run v3-group $group "${v3[@]}"
bench_run v4 - "${v4[@]}"; bench_run v4-group $group "${v4[@]}"
compare_named v3 v3-group v4 v4-group
for set in "v3 v3-group" "v4 v4-group"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
