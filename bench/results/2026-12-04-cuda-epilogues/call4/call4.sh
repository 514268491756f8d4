#!/usr/bin/env bash
# Call 4 (session 28) at $1 (1b7a9f4): every GPU test binary on the epilogue change, initcheck on its epilogue test;
# then decode batches (1, 8, 128 tokens) of deepseek-v4-flash fp4, qwen3 bf16 and deepseek-v3 fp8 against 7992fff's
# build (the tree with bench/tmp-call/s28/change4.patch taken back), alternating: the decode kernels' epilogues
# changed too.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_codecs test_cuda_combine test_cuda_gemm test_cuda_grouped_gemm test_cuda_layer \
  test_cuda_permutation test_cuda_routing test_cuda_tensor_core test_cuda_ep test_cli || exit 1
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do [[ -x $t ]] && run_test $(basename $t); done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 90 $san --tool initcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Bf16Epilogues*' > $OUT/t/initcheck.log 2>&1
echo "initcheck: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/initcheck.log | tail -1)"
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
patch -s -R -p1 < bench/tmp-call/s28/change4.patch && cmake -S . -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-base.log 2>&1 &&
  cmake --build build-base -j 16 --target steadymoe_cli > $OUT/t/build-base.log 2>&1 || { echo "base build failed"; tail -20 $OUT/t/build-base.log; }
patch -s -p1 < bench/tmp-call/s28/change4.patch
echo "base built at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tar czf $OUT/tests.tgz -C $OUT t
source bench/bench_runs.sh
BENCH_BUDGET_S=420
base=./build-base/steadymoe
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,128)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,128)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8,128)
BENCH_CLI=$base bench_run v4-base - "${v4[@]}"; bench_run v4-new - "${v4[@]}"
bench_run q3-new - "${q3[@]}"; BENCH_CLI=$base bench_run q3-base - "${q3[@]}"
BENCH_CLI=$base bench_run v3-base - "${v3[@]}"; bench_run v3-new - "${v3[@]}"
runs=(); for n in v4-base v4-new q3-base q3-new v3-base v3-new; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md
cd $OUT && tar czf t.tgz t && rm -rf t
