#!/usr/bin/env bash
# bf16 tokens copied straight into their pairs' rows, each read once (launch_copy_bf16_to_pairs), against the
# gather through the permutation's rows (STEADYMOE_COPY_TO_PAIRS=0), at $1. Tests: test_cuda_gathers (its new
# Bf16TokensCopiedIntoTheirPairsRowsGiveTheGatheredBytes), test_cuda_tensor_core (bf16 layers' batch
# invariance, graphs, reversed batches), test_cuda_layer; memcheck on the new test. Bench, the two ways
# alternating twice: qwen3-30b-a3b bf16 at 4096 and 16384 tokens; deepseek-v4-flash bf16 at 16384 once each;
# then one trace of qwen3 at 16384 each way. Carried build: bash bench/carry_build.sh steadymoe_cli
# test_cuda_gathers test_cuda_tensor_core test_cuda_layer, then carry build-carry-packed.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_gathers
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_gathers "*CopiedIntoTheirPairs*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-420}
q=(--workload qwen3-30b-a3b --format bf16 --tokens 4096,16384)
for r in 1 2; do
  bench_run q-pairs-$r - "${q[@]}"
  bench_run q-gather-$r STEADYMOE_COPY_TO_PAIRS=0 "${q[@]}"
done
v4=(--workload deepseek-v4-flash --format bf16 --tokens 16384)
bench_run v4-pairs - "${v4[@]}"
bench_run v4-gather STEADYMOE_COPY_TO_PAIRS=0 "${v4[@]}"
bench_points
compare_named q-pairs-1 q-gather-1 q-pairs-2 q-gather-2 > /dev/null
for way in pairs gather; do
  knob=STEADYMOE_UNSET=1; [[ $way == gather ]] && knob=STEADYMOE_COPY_TO_PAIRS=0
  env $knob ./build-gpu/steadymoe bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 16384 --trace \
    > $OUT/trace-q-$way.txt 2>&1
  grep -E "copy_bf16|pair_rows|first start" $OUT/trace-q-$way.txt
done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
