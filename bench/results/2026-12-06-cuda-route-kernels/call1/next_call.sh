#!/usr/bin/env bash
# Prepared for the next session (this one's device time went to refused starts). At $1 plus two patches, built
# and reviewed locally, never run on a GPU:
# - route-shared.patch: the one-token routing kernels permute from the ids and weights they hold in shared
#   memory (not read back from global memory right after writing them), and the block-per-token kernel issues
#   the mask's, bias's and hash id's loads beside the logits'; three more cases in the one-launch routing test.
# - route-quantises.patch (on top): at a decode step's one token, the routing kernel also quantises the token's
#   bf16 row to e4m3 (the bytes launch_gather_fp8 writes: the shared E4m3Word), where the routed experts
#   quantised it in a kernel of their own between the routing and their gate/up (deepseek-v3 and
#   deepseek-v4-flash; STEADYMOE_ROUTE_QUANTISES=0 keeps that kernel); a test of the bytes.
# The commit alone is built first (build-base), then the patched tree: the routing, permutation, gathers, layer
# and tensor-core suites; memcheck, racecheck and initcheck on the routing kernels' tests. Then
# readback-switch.patch (measurement only) adds STEADYMOE_ROUTE_IDS_READBACK=1, and the runs compare, at 1 and
# 8 tokens with traces: base; both patches; route-shared alone (STEADYMOE_ROUTE_QUANTISES=0); the early loads
# alone (that and the read back); qwen3 (bf16: nothing to quantise) without the last two. (About 8-9 min.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
D=bench/results/2026-12-06-cuda-held-pairs/next-call
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
configure_and_build build-base build-base steadymoe_cli || exit 1
echo "base built at $((SECONDS - start)) s"
patch -s -p1 < $D/route-shared.patch && patch -s -p1 < $D/route-quantises.patch || { echo 'the patches do not apply'; exit 1; }
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation test_cuda_gathers test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_routing
run_test test_cuda_permutation
run_test test_cuda_gathers
run_test test_cuda_layer
run_test test_cuda_tensor_core
F='*RoutingAndPermutationInOneLaunch*:*BlockAndWarpPerToken*:*TokenQuantisedBeside*'
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
Q0=STEADYMOE_ROUTE_QUANTISES=0
R1="STEADYMOE_ROUTE_QUANTISES=0 STEADYMOE_ROUTE_IDS_READBACK=1"
q="--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace"
v4="--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace"
v3="--workload deepseek-v3 --format fp8 --tokens 1,8 --trace"
for again in "" -again; do
  BENCH_CLI=$B bench_run q-base$again - $q
  bench_run q-shared$again - $q
  for w in v4 v3; do
    BENCH_CLI=$B bench_run $w-base$again - ${!w}
    bench_run $w-both$again - ${!w}
    bench_run $w-shared$again $Q0 ${!w}
    bench_run $w-early$again "$R1" ${!w}
  done
done
{ compare_named q-base q-shared q-base-again q-shared-again
  for w in v4 v3; do
    compare_named $w-base $w-both $w-shared $w-early $w-base-again $w-both-again $w-shared-again $w-early-again
  done; } > $OUT/compare-all.md 2>&1
head -90 $OUT/compare-all.md
# On an H200, with what time is left, the README's prefill figures as served (the base build: the patches touch
# only one-token steps).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  BENCH_CLI=$B bench_run v3-prefill - --workload deepseek-v3 --format fp8 --tokens 16384
  BENCH_CLI=$B bench_run v4-prefill - --workload deepseek-v4-flash --format fp4 --tokens 16384
  BENCH_CLI=$B bench_run q-prefill - --workload qwen3-30b-a3b --format bf16 --tokens 16384
  grep -A3 "^tokens" $OUT/bench.txt | grep "^16384" | cut -c1-250
fi
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
