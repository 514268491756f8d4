#!/usr/bin/env bash
# Session call 5 (short): the final dispatch checked and benchmarked.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/b/configure.log 2>&1
cmake --build build-gpu -j 16 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core > $OUT/b/build.log 2>&1 || cmake --build build-gpu -j 16 > $OUT/b/build.log 2>&1 || { grep -A5 error $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/tests.txt
for t in test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core; do
  timeout 120 build-gpu/tests/$t > $OUT/b/$t.log 2>&1; echo "$t: rc=$? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/b/$t.log | tr '\n' ' ')" >> $OUT/tests.txt
done
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
timeout 60 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,4096,16384 --json $OUT/b/q-auto.json 2>&1 | grep -v "^\[bench" > $OUT/bench.txt
echo "qwen done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 80 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 8,4096,16384 --json $OUT/b/v4-auto.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
cd $OUT && tar czf b.tgz b && rm -rf b
