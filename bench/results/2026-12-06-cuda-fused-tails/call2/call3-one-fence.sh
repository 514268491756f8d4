#!/usr/bin/env bash
# Call 3 (2355786 + one-fence.patch, record commit in $1): call 2 measured the fused tails slower; here each
# arrival's fence is taken by the arriving thread alone after the consumers' barrier (one fence a row, not one a
# thread). The new test and the tensor-core suite's graph and invariance tests; bench at 1 and 8 tokens, fused
# against both switches off, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-base
source bench/device_tests.sh
C=STEADYMOE_FUSED_COMBINE=0 Q=STEADYMOE_FUSED_QUANTISE=0
{
build_gpu steadymoe_cli test_cuda_tensor_core || exit 1
timeout 150 build-gpu/tests/test_cuda_tensor_core --gtest_filter='*DecodeGemmsCombine*:*GraphReplays*:*BatchInvariant*' > $OUT/t/first.log 2>&1
rc=$?; echo "tests: rc=$rc $(grep -c '^\[       OK' $OUT/t/first.log) OK"; grep -E "FAILED|Failure|launches" $OUT/t/first.log | head -20
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=330
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8)
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8)
bench_run v4 - "${v4[@]}"; bench_run v4off "$C $Q" "${v4[@]}"; bench_run v4off2 "$C $Q" "${v4[@]}"; bench_run v42 - "${v4[@]}"
bench_run v4C $C "${v4[@]}"; bench_run v4Q $Q "${v4[@]}"
bench_run q - "${q[@]}"; bench_run qoff $C "${q[@]}"; bench_run qoff2 $C "${q[@]}"; bench_run q2 - "${q[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3off "$C $Q" "${v3[@]}"
compare_named v4 v4off v4off2 v42 v4C v4Q q qoff qoff2 q2 v3 v3off > /dev/null
cat $OUT/compare.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
