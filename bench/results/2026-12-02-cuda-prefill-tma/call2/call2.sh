#!/usr/bin/env bash
# Session call 2: every GPU test with bf16 between the stages, then the benches, and per-kernel times
# (nsys) of qwen3 bf16 and deepseek-v3 fp8 prefill.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b
start=$SECONDS
timeout 300 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s (rc=$?)" >> $OUT/tests.txt
b=./build-gpu/steadymoe
timeout 70 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,4096,16384 --json $OUT/b/q.json 2>&1 | grep -v "^\[bench" > $OUT/bench.txt
echo "qwen3 done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 100 $b bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 1,128,4096,16384 --json $OUT/b/v3.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "v3 done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 70 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 4096,16384 --json $OUT/b/v4.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "v4 done at $((SECONDS-start)) s" >> $OUT/bench.txt
BENCH_ARGS="--tokens 16384 --repeat 2" timeout $((560-SECONDS+start)) bench/run_gpu.sh $OUT/p profile qwen3-30b-a3b:bf16 deepseek-v3:fp8 > $OUT/profile.txt 2>&1
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
cd $OUT && tar czf b.tgz b && rm -rf b
