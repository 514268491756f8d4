#!/usr/bin/env bash
# Session call 3 (the session's last device time): each GPU test binary once at $1, then deepseek-v3 fp8 and
# deepseek-v4 fp4 layers with the routed experts' stream above the shared expert's (default), with both at the
# default priority, and without dependent launches either; repeats of the first two measure the run-to-run noise.
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
grep -E "^===|^\[  (PASSED|FAILED) |Failure" $OUT/b/gpu-tests.log >> $OUT/tests.txt
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 490 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 90 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
v3=(--workload deepseek-v3 --format fp8 --tokens 1,128,4096)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8,4096)
run v3 X=1 -- "${v3[@]}"
run v3-flat STEADYMOE_STREAM_PRIORITIES=0 -- "${v3[@]}"
run v3-plain STEADYMOE_STREAM_PRIORITIES=0 STEADYMOE_DEPENDENT_LAUNCHES=0 -- "${v3[@]}"
run v4 X=1 -- "${v4[@]}"
run v4-flat STEADYMOE_STREAM_PRIORITIES=0 -- "${v4[@]}"
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128
run v3-again X=1 -- "${v3[@]}"
run v3-flat-again STEADYMOE_STREAM_PRIORITIES=0 -- "${v3[@]}"
cd $OUT && tar czf b.tgz b && rm -rf b
