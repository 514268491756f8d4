#!/usr/bin/env bash
# Call 1 (s43; commit in $1): the extended one-launch routing test (graph node count, new cases) and the
# layer and tensor-core suites; the sanitizers on the routing tests; the one launch against two at 1 and 8
# tokens (qwen3 bf16, deepseek-v4-flash fp4, deepseek-v3 fp8), alternating, for the README (H200 if one comes).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_routing test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_routing
run_test test_cuda_layer
run_test test_cuda_tensor_core
memcheck test_cuda_routing
for tool in racecheck initcheck; do
  timeout 100 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_routing > $OUT/t/$tool-routing.log 2>&1
  echo "$tool on test_cuda_routing: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/$tool-routing.log | tail -1)"
done
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=420
off=STEADYMOE_ROUTE_AND_PERMUTE=0
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8 --trace)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
bench_run q - "${q[@]}"; bench_run qoff $off "${q[@]}"
bench_run v4 - "${v4[@]}"; bench_run v4off $off "${v4[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3off $off "${v3[@]}"
bench_run qoff2 $off "${q[@]}"; bench_run q2 - "${q[@]}"
compare_named q qoff qoff2 q2 v4 v4off v3 v3off
python3 bench/compare_traces.py q=$OUT/t/q.json qoff=$OUT/t/qoff.json v4=$OUT/t/v4.json v4off=$OUT/t/v4off.json v3=$OUT/t/v3.json v3off=$OUT/t/v3off.json > $OUT/traces.md 2>&1 || true
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
