#!/usr/bin/env bash
# Session call 2: tests under every schedule, then prefill schedules compared.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b
start=$SECONDS
bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
for sched in per-tile two-per-sm wide wide-persistent; do
  echo "=== $sched qwen3 bf16" >> $OUT/bench.txt
  STEADYMOE_TILED_SCHEDULE=$sched timeout 120 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 4096,16384 --json $OUT/b/q-$sched.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
done
for sched in per-tile persistent; do
  echo "=== $sched v4-flash fp4" >> $OUT/bench.txt
  STEADYMOE_TILED_SCHEDULE=$sched timeout 200 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 4096,16384 --json $OUT/b/v4-$sched.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
done
echo "benches done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 150 python3 bench/gpu_peers.py $OUT/b/peers.json $OUT/b/q-wide.json $OUT/b/q-two-per-sm.json > $OUT/peers.md 2>&1
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
cd $OUT && tar czf b.tgz b && rm -rf b
