#!/usr/bin/env bash
# Call 3 (s32): the fused routing and permutation alone (quantising once taken out), now in timed runs too:
# qwen3 fused everywhere / two launches (STEADYMOE_ROUTE_PERMUTE=0) / fused in untimed runs only (=untimed), two
# rounds; deepseek-v4-flash and v3 fused against two launches; at 1 and 8 tokens. Tests first.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_routing test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_layer STEADYMOE_ROUTE_PERMUTE=0
grep -E "^\[  FAILED|Failure|Expected|Which is|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=420
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
bench_run q3 - "${q3[@]}"; bench_run q3-off STEADYMOE_ROUTE_PERMUTE=0 "${q3[@]}"; bench_run q3-u STEADYMOE_ROUTE_PERMUTE=untimed "${q3[@]}"
bench_run q3-2 - "${q3[@]}"; bench_run q3-off2 STEADYMOE_ROUTE_PERMUTE=0 "${q3[@]}"; bench_run q3-u2 STEADYMOE_ROUTE_PERMUTE=untimed "${q3[@]}"
bench_run v4 - "${v4[@]}"; bench_run v4-off STEADYMOE_ROUTE_PERMUTE=0 "${v4[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-off STEADYMOE_ROUTE_PERMUTE=0 "${v3[@]}"
compare_named q3 q3-off q3-u q3-2 q3-off2 q3-u2 v4 v4-off v3 v3-off
for set in "q3 q3-off q3-u q3-2 q3-off2 q3-u2" "v4 v4-off" "v3 v3-off"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
