#!/usr/bin/env bash
# Session call 4 (the session's last device time): the GPU tests once each at $1 (the route kernel's
# smaller code; the GEMM kernels are call 3's), the benches from one token up, and GPU time per kernel
# of a one-token layer, against call 3's.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 > $OUT/b/build.log 2>&1 || { grep -E "error" -A5 $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/tests.txt
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  [[ -x $t ]] || continue
  echo "=== $(basename $t)" >> $OUT/b/gpu-tests.log
  timeout 100 $t >> $OUT/b/gpu-tests.log 2>&1; echo "$(basename $t): rc=$?" >> $OUT/tests.txt
done
grep -E "^===|^\[  (PASSED|FAILED) |Failure|relative" $OUT/b/gpu-tests.log >> $OUT/tests.txt
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, then bench args
  local name=$1; shift
  echo "=== $name" >> $OUT/bench.txt
  timeout 100 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run q --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,16384
run v3 --workload deepseek-v3 --format fp8 --tokens 1,128,16384
BENCH_ARGS="--tokens 1 --repeat 1" timeout 100 bench/run_gpu.sh $OUT/p profile qwen3-30b-a3b:bf16 deepseek-v3:fp8 > $OUT/profile.txt 2>&1
echo "(profile done at $((SECONDS-start)) s)" >> $OUT/bench.txt
rm -f $OUT/p/device.txt
cd $OUT && tar czf b.tgz b p && rm -rf b p
