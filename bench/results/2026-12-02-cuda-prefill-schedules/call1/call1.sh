#!/usr/bin/env bash
# Session call: tests (all schedules), then schedule benchmarks.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b
start=$SECONDS
bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
for sched in default STEADYMOE_PERSISTENT_TILES=1 STEADYMOE_TILED_CTAS_PER_SM=2; do
  e=""; [[ $sched != default ]] && e=$sched
  echo "=== $sched qwen3 bf16" >> $OUT/bench.txt
  env $e timeout 120 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 4096,16384 --json $OUT/b/q-$sched.json >> $OUT/bench.txt 2>&1 || echo "rc=$?" >> $OUT/bench.txt
done
for sched in default STEADYMOE_PERSISTENT_TILES=1; do
  e=""; [[ $sched != default ]] && e=$sched
  echo "=== $sched v3 fp8" >> $OUT/bench.txt
  env $e timeout 120 $b bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 4096,16384 --json $OUT/b/v3-$sched.json >> $OUT/bench.txt 2>&1 || echo "rc=$?" >> $OUT/bench.txt
done
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
cd $OUT && tar czf b.tgz b && rm -rf b
