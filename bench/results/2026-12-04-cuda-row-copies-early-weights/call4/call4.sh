#!/usr/bin/env bash
# Call 4 (the final device code): early weights for bf16 and FP4 weights only (FP8 waits first), bf16 rows by the
# copy kernel, e4m3 codes by the old copy. Tests, memcheck on the gathers, then qwen3 bf16 (1 to 16384 tokens),
# deepseek-v4-flash fp4 at 1 and 8 tokens as set and with STEADYMOE_EARLY_WEIGHTS=0, deepseek-v3 fp8 at one token.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_gathers test_cuda_layer test_cuda_tensor_core test_cuda_grouped_gemm || exit 1
for t in test_cuda_gathers test_cuda_layer test_cuda_tensor_core; do run_test $t; done
run_test test_cuda_grouped_gemm '' '*Indexed*:*FewRow*:*Decode*:*Fp4Meeting*'
memcheck test_cuda_gathers
grep -E "^\[  FAILED|Failure|Expected|Which is|gave 0x" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=390
bench_run q3 - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,4096,16384
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-off STEADYMOE_EARLY_WEIGHTS=0 "${v4[@]}"
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1 --trace
compare_named q3 v4-off v4 v3
runs=(); for n in v4-off v4; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
grep -E "decode_kernel|span" $OUT/traces.md | head -20
cd $OUT && tar czf t.tgz t && rm -rf t
