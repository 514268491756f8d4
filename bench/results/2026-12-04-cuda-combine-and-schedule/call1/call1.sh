#!/usr/bin/env bash
# Draft for the next session's first call (scratch, not committed). Check out a branch holding next/item-order
# and next/bf16-mid on main, save `git diff main HEAD -- src > bench/tmp-call/s29/change.patch`, run at $1:
# every GPU test binary (and test_cuda_grouped_gemm, _layer under STEADYMOE_ITEM_ORDER=tiles), then deepseek-v3
# fp8 and qwen3 bf16 at 4096 and 16384 tokens against main's build, and against tile order; the DRAM bytes of
# deepseek-v3's routed GEMMs by expert and in tile order.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_codecs test_cuda_combine test_cuda_gemm test_cuda_grouped_gemm test_cuda_layer \
  test_cuda_permutation test_cuda_routing test_cuda_tensor_core test_cuda_ep test_cli || exit 1
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do [[ -x $t ]] && run_test $(basename $t); done
run_test test_cuda_grouped_gemm STEADYMOE_ITEM_ORDER=tiles
run_test test_cuda_layer STEADYMOE_ITEM_ORDER=tiles
memcheck test_cuda_grouped_gemm '*EveryTiledSchedule*'
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
build_base bench/tmp-call/s29/change.patch steadymoe_cli
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=420
v3=(--workload deepseek-v3 --format fp8 --tokens 4096,16384)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 4096,16384)
BENCH_CLI=./build-base/steadymoe bench_run v3-main - "${v3[@]}"; bench_run v3-new - "${v3[@]}"
bench_run v3-tiles STEADYMOE_ITEM_ORDER=tiles "${v3[@]}"
bench_run q3-new - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-main - "${q3[@]}"
bench_run q3-tiles STEADYMOE_ITEM_ORDER=tiles "${q3[@]}"
runs=(); for n in v3-main v3-new v3-tiles q3-main q3-new q3-tiles; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md
cd $OUT && tar czf t.tgz t && rm -rf t
