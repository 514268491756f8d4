#!/usr/bin/env bash
# Session call 3: at $1 (permutations of up to 1024 pairs in one block; the review mends). The permutation, grouped-GEMM,
# tensor-core and layer tests; compute-sanitizer memcheck and racecheck on the permutation test; then the
# decode layers as they now stand: qwen3 bf16, deepseek-v3 fp8 and deepseek-v4 fp4 at 1, 8, 128, 256 tokens.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 > $OUT/b/build.log 2>&1 || { grep -E "error" -A5 $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/tests.txt
for t in test_cuda_permutation test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do  # (+ the 64-row CTAs below)
  echo "=== $t" >> $OUT/b/gpu-tests.log
  timeout 60 build-gpu/tests/$t >> $OUT/b/gpu-tests.log 2>&1; echo "$t: rc=$?" >> $OUT/tests.txt
done
echo "=== test_cuda_grouped_gemm (STEADYMOE_DECODE_KERNEL=tiled)" >> $OUT/b/gpu-tests.log
STEADYMOE_DECODE_KERNEL=tiled timeout 60 build-gpu/tests/test_cuda_grouped_gemm >> $OUT/b/gpu-tests.log 2>&1; echo "test_cuda_grouped_gemm (tiled): rc=$?" >> $OUT/tests.txt
grep -E "^===|^\[  (PASSED|FAILED) |Failure|CTAs per SM" $OUT/b/gpu-tests.log >> $OUT/tests.txt
san=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck; do
  timeout 60 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_permutation > $OUT/b/sanitize-$tool.log 2>&1
  echo "compute-sanitizer $tool (permutation): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/b/sanitize-$tool.log | tr '\n' ' ')" >> $OUT/tests.txt
done
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 470 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 90 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
run v3 X=1 -- --workload deepseek-v3 --format fp8 --tokens 1,8,128,256
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
cd $OUT && tar czf b.tgz b && rm -rf b
