#!/usr/bin/env bash
# Call 6 (s32): the routing and permutation kernels asking for every load at once (e57f5cd): tests, initcheck on the
# routing tests and the layer's, qwen3 at 1 and 8 tokens twice and deepseek-v4-flash once, with traces (against
# the same kernels' ends in calls 1-5, which ran main's routing on other machines). The device time is nearly spent:
# the deepseek-v4-flash run is skipped if the call is late.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_routing test_cuda_permutation test_cuda_layer; do run_test $t; done
run_test test_cuda_tensor_core STEADYMOE_UNSET=1 '*MatchesTheCpu*:*CudaRouting*:*Bitwise*'
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 40 $san --tool initcheck --error-exitcode 3 build-gpu/tests/test_cuda_tensor_core --gtest_filter='*MatchesTheCpu*:*CudaRouting*' > $OUT/t/initcheck.log 2>&1
echo "initcheck test_cuda_tensor_core: rc=$? $(grep -E 'ERROR SUMMARY|^\[  PASSED|^\[  FAILED' $OUT/t/initcheck.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|Expected|Which is|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
BENCH_BUDGET_S=100
bench_run q3 - "${q3[@]}"; bench_run q3-2 - "${q3[@]}"
BENCH_BUDGET_S=95
bench_run v4 - "${v4[@]}"
compare_named q3 q3-2 v4
for set in "q3 q3-2" "v4"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
