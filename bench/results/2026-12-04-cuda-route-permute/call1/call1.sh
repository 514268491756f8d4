#!/usr/bin/env bash
# Call 1 (s32): the decode step's routing fused with its permutation (STEADYMOE_ROUTE_PERMUTE=0 keeps two launches)
# and one quantisation of the tokens for the routed and shared gate/up GEMMs (STEADYMOE_QUANTISE_ONCE=0 keeps
# each group's own): tests both ways, memcheck of the fused test, qwen3 / deepseek-v4-flash / deepseek-v3 at 1
# and 8 tokens, each against both switches off in the same build.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
off="STEADYMOE_ROUTE_PERMUTE=0 STEADYMOE_QUANTISE_ONCE=0"
{
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_layer test_cuda_tensor_core || exit 1
for t in test_cuda_routing test_cuda_permutation test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_layer "$off"
run_test test_cuda_tensor_core "$off" '*Graph*:*Bitwise*:*Invarian*'
memcheck test_cuda_routing
grep -E "^\[  FAILED|Failure|Expected|Which is|differ" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=520
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
bench_run q3 - "${q3[@]}"; bench_run q3-off "$off" "${q3[@]}"
bench_run v4 - "${v4[@]}"; bench_run v4-off "$off" "${v4[@]}"
bench_run q3-2 - "${q3[@]}"; bench_run q3-off2 "$off" "${q3[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-off "$off" "${v3[@]}"
bench_run v4-q STEADYMOE_ROUTE_PERMUTE=0 "${v4[@]}"
compare_named q3 q3-off q3-2 q3-off2 v4 v4-off v4-q v3 v3-off
for set in "q3 q3-off q3-2 q3-off2" "v4 v4-off v4-q" "v3 v3-off"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
