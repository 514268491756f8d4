#!/usr/bin/env bash
# Session call 2: at $1 (FP4 weights meeting e4m3 activations on the FP8 tensor cores). The codec, grouped-GEMM,
# tensor-core, layer and CLI tests (grouped GEMM also with STEADYMOE_FEW_ROW_KERNELS=0: 64 tokens to a CTA
# throughout); memcheck and racecheck on the new grouped-GEMM test; deepseek-v4-flash fp4 at 1 .. 16384 tokens, and
# at 1 .. 256 with STEADYMOE_FP8_TENSOR_CORES=0 (FP4 widened to bf16, as before: the baseline of the same run).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 > $OUT/b/build.log 2>&1 || { grep -E "error" -A5 $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/tests.txt
for t in test_cuda_codecs test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer test_cli; do
  echo "=== $t" >> $OUT/b/gpu-tests.log
  timeout 90 build-gpu/tests/$t >> $OUT/b/gpu-tests.log 2>&1; echo "$t: rc=$?" >> $OUT/tests.txt
done
echo "=== test_cuda_grouped_gemm (STEADYMOE_FEW_ROW_KERNELS=0)" >> $OUT/b/gpu-tests.log
STEADYMOE_FEW_ROW_KERNELS=0 timeout 60 build-gpu/tests/test_cuda_grouped_gemm >> $OUT/b/gpu-tests.log 2>&1; echo "test_cuda_grouped_gemm (few-row kernels off): rc=$?" >> $OUT/tests.txt
for tool in memcheck racecheck; do
  timeout 90 /usr/local/cuda/bin/compute-sanitizer --tool $tool build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4MeetingE4m3*' > $OUT/b/sanitize-$tool.log 2>&1
  echo "$tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/b/sanitize-$tool.log | tr '\n' ' ')" >> $OUT/tests.txt
done
grep -E "^===|^\[  (PASSED|FAILED) |Failure|CTAs per SM|relative|Expected|Which is|actual" $OUT/b/gpu-tests.log | head -120 >> $OUT/tests.txt
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 480 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 150 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384
run v4-bf16-widening STEADYMOE_FP8_TENSOR_CORES=0 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
cd $OUT && tar czf b.tgz b && rm -rf b
