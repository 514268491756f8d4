#!/usr/bin/env bash
# Session call 4: tests with rows by tensor copies (default), then benchmarks both ways and per schedule.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b
start=$SECONDS
bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
q="--workload qwen3-30b-a3b --format bf16"
timeout 100 $b bench --backend cuda $q --tokens 1,8,128,256,4096,16384 --json $OUT/b/q-auto.json 2>&1 | grep -v "^\[bench" > $OUT/bench.txt
STEADYMOE_ROW_TENSOR_COPIES=0 timeout 100 $b bench --backend cuda $q --tokens 1,8,128,256,4096,16384 --json $OUT/b/q-auto-cpasync.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
for sched in per-tile two-per-sm wide wide-persistent persistent; do
  echo "=== $sched" >> $OUT/bench.txt
  STEADYMOE_TILED_SCHEDULE=$sched timeout 60 $b bench --backend cuda $q --tokens 4096,16384 --json $OUT/b/q-$sched.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
done
echo "qwen done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 120 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384 --json $OUT/b/v4-auto.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
STEADYMOE_ROW_TENSOR_COPIES=0 timeout 120 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 4096,16384 --json $OUT/b/v4-cpasync.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "benches done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 100 python3 bench/gpu_peers.py $OUT/b/peers.json $OUT/b/q-auto.json $OUT/b/v4-auto.json > $OUT/peers.md 2>&1
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
cd $OUT && tar czf b.tgz b && rm -rf b
