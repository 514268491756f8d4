#!/usr/bin/env bash
# Session call 1: every GPU test at $1 with all variants (the last session's unrun route, combine and
# overlapped-folds commits), deepseek-v3 fp8 prefill by default against overlapped folds, the benches from one
# token up, and GPU time per kernel of a one-token layer (the route and combine kernels after their changes).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
timeout 260 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 120 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run v3 X=1 -- --workload deepseek-v3 --format fp8 --tokens 1,128,4096,16384
run v3-overlapped STEADYMOE_OVERLAPPED_FOLDS=1 -- --workload deepseek-v3 --format fp8 --tokens 4096,16384
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,16384
BENCH_ARGS="--tokens 1 --repeat 1" timeout 100 bench/run_gpu.sh $OUT/p profile deepseek-v3:fp8 qwen3-30b-a3b:bf16 > $OUT/profile.txt 2>&1
echo "(profile done at $((SECONDS-start)) s)" >> $OUT/bench.txt
rm -f $OUT/t/device.txt $OUT/p/device.txt
cd $OUT && tar czf b.tgz b t p && rm -rf b t p
