#!/usr/bin/env bash
# Session call 4 (the last device time): at $1 the grouped GEMMs let the next kernel start only at their
# last epilogue. Two layer tests, then deepseek-v3 fp8 with and without dependent launches (call 3 measured
# them with the GEMMs letting it start at once), qwen3 bf16 and deepseek-v4 fp4.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 > $OUT/b/build.log 2>&1 || { grep -E "error" -A5 $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/tests.txt
for t in test_cuda_layer test_cuda_tensor_core; do
  echo "=== $t" >> $OUT/b/gpu-tests.log
  timeout 60 build-gpu/tests/$t >> $OUT/b/gpu-tests.log 2>&1; echo "$t: rc=$?" >> $OUT/tests.txt
done
grep -E "^===|^\[  (PASSED|FAILED) |Failure" $OUT/b/gpu-tests.log >> $OUT/tests.txt
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 200 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 75 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
v3=(--workload deepseek-v3 --format fp8 --tokens 1,128,4096)
run v3 X=1 -- "${v3[@]}"
run v3-plain STEADYMOE_DEPENDENT_LAUNCHES=0 -- "${v3[@]}"
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8
cd $OUT && tar czf b.tgz b && rm -rf b
