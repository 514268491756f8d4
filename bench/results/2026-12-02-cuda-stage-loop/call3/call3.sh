#!/usr/bin/env bash
# Session call 3: every GPU test at $1, the benches beside their peers (dense GEMMs, torch._grouped_mm),
# and GPU time per kernel of a one-token layer (qwen3 bf16, deepseek-v3 fp8): where the layer's time
# beyond the experts goes.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
timeout 240 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 150 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,4096,16384
run v3 X=1 -- --workload deepseek-v3 --format fp8 --tokens 1,128,4096,16384
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 8,4096,16384
timeout 90 python3 bench/gpu_peers.py $OUT/b/peers.json $OUT/b/q.json $OUT/b/v3.json > $OUT/peers.md 2>&1
echo "(peers done at $((SECONDS-start)) s)" >> $OUT/bench.txt
BENCH_ARGS="--tokens 1 --repeat 1" timeout 120 bench/run_gpu.sh $OUT/p profile qwen3-30b-a3b:bf16 deepseek-v3:fp8 > $OUT/profile.txt 2>&1
echo "(profile done at $((SECONDS-start)) s)" >> $OUT/bench.txt
rm -f $OUT/t/device.txt $OUT/p/device.txt
cd $OUT && tar czf b.tgz b t p && rm -rf b t p
