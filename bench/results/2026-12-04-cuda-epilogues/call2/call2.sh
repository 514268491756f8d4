#!/usr/bin/env bash
# Call 2 (session 28) at $1: the epilogues' bf16 rounding by the hardware's conversion and the down GEMM's scatter
# from registers in its own loop (bench/tmp-call/s28/change.patch against 7992fff). Tests (the all-floats bf16
# conversion test, the GEMM, layer and tensor-core tests, schedules), then the bench: this build against 7992fff's
# (the same tree with the patch taken back), alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_codecs test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_codecs
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_grouped_gemm STEADYMOE_PARKED_EPILOGUES=1
run_test test_cuda_layer STEADYMOE_PARKED_EPILOGUES=1
run_test test_cuda_layer STEADYMOE_TILED_SCHEDULE=per-tile
run_test test_cuda_layer STEADYMOE_GEMM_KERNEL=mma
memcheck test_cuda_grouped_gemm '*Bf16Epilogues*:*EveryTiledSchedule*'
grep -E "^\[  FAILED|Failure|Expected|Which is|first differing" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
patch -s -R -p1 < bench/tmp-call/s28/change.patch && cmake -S . -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-base.log 2>&1 &&
  cmake --build build-base -j 16 --target steadymoe_cli > $OUT/t/build-base.log 2>&1 || { echo "base build failed"; tail -20 $OUT/t/build-base.log; }
patch -s -p1 < bench/tmp-call/s28/change.patch
echo "base built at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=540
v3=(--workload deepseek-v3 --format fp8 --tokens 4096,16384)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 4096,16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
BENCH_CLI=./build-base/steadymoe bench_run v3-base - "${v3[@]}"; bench_run v3-new - "${v3[@]}"
BENCH_CLI=./build-base/steadymoe bench_run q3-base - "${q3[@]}"; bench_run q3-new - "${q3[@]}"
bench_run q3-new-again - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-base-again - "${q3[@]}"
bench_run v4-new - "${v4[@]}"; BENCH_CLI=./build-base/steadymoe bench_run v4-base - "${v4[@]}"
runs=(); for n in v3-base v3-new q3-base q3-new q3-base-again q3-new-again v4-base v4-new; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md
grep -E "^=== |^ +[0-9]+ " $OUT/bench.txt | awk '{print $1, $2, $8, $9, $10, $(NF-4), $(NF-3), $(NF-2), $(NF-1), $NF}'
cd $OUT && tar czf t.tgz t && rm -rf t
