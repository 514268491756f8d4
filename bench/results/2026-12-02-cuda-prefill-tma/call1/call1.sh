#!/usr/bin/env bash
# Session call 1: every GPU test (incl. e4m3 rows by tensor copies), then deepseek-v3 fp8 with and without
# e4m3 rows by tensor copies (decode and prefill), and qwen3 bf16 at the default.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b
start=$SECONDS
timeout 330 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s (rc=$?)" >> $OUT/tests.txt
b=./build-gpu/steadymoe
v3="--workload deepseek-v3 --format fp8"
timeout 110 $b bench --backend cuda $v3 --tokens 1,8,128,256,4096,16384 --json $OUT/b/v3-auto.json 2>&1 | grep -v "^\[bench" > $OUT/bench.txt
echo "v3 default done at $((SECONDS-start)) s" >> $OUT/bench.txt
STEADYMOE_ROW_TENSOR_COPIES=all timeout 90 $b bench --backend cuda $v3 --tokens 4096,16384 --json $OUT/b/v3-all.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "v3 all done at $((SECONDS-start)) s" >> $OUT/bench.txt
timeout 40 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 16384 --json $OUT/b/q-auto.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
cd $OUT && tar czf b.tgz b && rm -rf b
