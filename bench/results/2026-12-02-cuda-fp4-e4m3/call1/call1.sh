#!/usr/bin/env bash
# Session call 1: at $1 (last session's unrun commits). Every GPU test with each variant (bench/run_gpu.sh OUT tests),
# then deepseek-v4-flash fp4 at 1, 8, 128, 256, 4096, 16384 tokens: the baseline for this session's FP4 work.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
echo "=== v4" >> $OUT/bench.txt
timeout 150 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384 --json $OUT/t/v4.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
echo "(v4 done at $((SECONDS-start)) s)" >> $OUT/bench.txt
cd $OUT && tar czf t.tgz t && rm -rf t
