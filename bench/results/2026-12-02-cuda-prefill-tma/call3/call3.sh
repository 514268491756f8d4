#!/usr/bin/env bash
# Session call 3: every GPU test with the chunked permutation and vector gathers, the benches, and the
# GPU time per kernel (profiler duration metric) of qwen3 bf16 and deepseek-v3 fp8 at 16384 tokens.
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
timeout $((570-SECONDS+start)) bench/run_gpu.sh $OUT/p profile qwen3-30b-a3b:bf16 deepseek-v3:fp8 > $OUT/profile.txt 2>&1
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
rm -f $OUT/t/device.txt $OUT/p/device.txt
cd $OUT && tar czf b.tgz b t p && rm -rf b t/logs.tgz p/logs.tgz
