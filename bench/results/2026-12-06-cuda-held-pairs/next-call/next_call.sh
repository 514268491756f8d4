#!/usr/bin/env bash
# Prepared for the next session (this one's device time went to refused starts): at $1 plus route-shared.patch,
# in which the one-token routing kernels permute from the ids and weights they hold in shared memory (not read
# back from global memory right after writing them), and the block-per-token kernel issues the mask's, bias's
# and hash id's loads beside the logits'; three more cases in the one-launch routing test (top_k 32 on both
# kernels, hash routing with its one token masked). Built locally, reviewed, not run on a GPU.
# The routing, permutation, layer and tensor-core suites; memcheck, racecheck and initcheck on the routing
# kernels' comparison tests. Then readback-switch.patch (measurement only, not for the tree) adds
# STEADYMOE_ROUTE_IDS_READBACK=1, under which the permutation reads the ids and weights back from global memory
# as before, and qwen3 bf16, deepseek-v4-flash fp4 and deepseek-v3 fp8 at 1 and 8 tokens run base (the commit
# alone, built beside it) / patched / patched with the read back, in turn, twice, with traces. (About 8 min.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
D=bench/results/2026-12-06-cuda-held-pairs/next-call
P=$D/route-shared.patch
patch -s -p1 < $P || { echo 'route-shared.patch does not apply'; exit 1; }
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_layer test_cuda_tensor_core || exit 1
build_base $P steadymoe_cli || exit 1
run_test test_cuda_routing
run_test test_cuda_permutation
run_test test_cuda_layer
run_test test_cuda_tensor_core
F='*RoutingAndPermutationInOneLaunch*:*BlockAndWarpPerToken*'
memcheck test_cuda_routing "$F"
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer | head -1)
for tool in racecheck initcheck; do
  timeout 100 $san --tool $tool build-gpu/tests/test_cuda_routing --gtest_filter="$F" > $OUT/t/$tool.log 2>&1
  echo "$tool: rc=$? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
patch -s -p1 < $D/readback-switch.patch && cmake --build build-gpu --target steadymoe_cli > $OUT/t/build-switch.log 2>&1
echo "switch built: rc=$? at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=540
B=./build-base/steadymoe
S=STEADYMOE_ROUTE_IDS_READBACK=1
q="--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace"
v4="--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace"
v3="--workload deepseek-v3 --format fp8 --tokens 1,8 --trace"
for again in "" -again; do
  for w in q v4 v3; do
    BENCH_CLI=$B bench_run $w-base$again - ${!w}
    bench_run $w-shared$again - ${!w}
    bench_run $w-readback$again $S ${!w}
  done
done
for w in q v4 v3; do compare_named $w-base $w-shared $w-readback $w-base-again $w-shared-again $w-readback-again; done \
  > $OUT/compare-all.md 2>&1
head -80 $OUT/compare-all.md
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
