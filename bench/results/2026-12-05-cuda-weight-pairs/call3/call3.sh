#!/usr/bin/env bash
# Call 3 (commit in $1): weight pairs (bench/tmp-call/s43/weight-pairs.patch) measured over more pairs and
# formats, and the producer's scale addresses once a tile (producer-addresses.patch) on top of them.
# build-gpu: both patches; build-base: weight pairs only. Knob W turns weight pairs on.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+weight-pairs
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
patch -p1 < bench/tmp-call/s43/weight-pairs.patch || exit 1
P=bench/tmp-call/s43/producer-addresses.patch
patch -p1 < $P || exit 1
source bench/device_tests.sh
{
build_gpu steadymoe_cli || exit 1
build_base $P steadymoe_cli || exit 1
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=430
W=STEADYMOE_WEIGHT_PAIRS=1
B=./build-base/steadymoe
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
v3b=(--workload deepseek-v3 --format bf16 --tokens 16384)
v3s=(--workload deepseek-v3 --format fp8 --tokens 1024)
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
for i in 1 2; do
  BENCH_CLI=$B bench_run v3-$i - "${v3[@]}"; BENCH_CLI=$B bench_run v3w-$i $W "${v3[@]}"; bench_run v3wp-$i $W "${v3[@]}"
done
for i in 1 2 3; do BENCH_CLI=$B bench_run q-$i - "${q[@]}"; BENCH_CLI=$B bench_run qw-$i $W "${q[@]}"; done
for i in 1 2; do BENCH_CLI=$B bench_run v3b-$i - "${v3b[@]}"; BENCH_CLI=$B bench_run v3bw-$i $W "${v3b[@]}"; done
for i in 1 2; do BENCH_CLI=$B bench_run v3s-$i - "${v3s[@]}"; BENCH_CLI=$B bench_run v3sw-$i $W "${v3s[@]}"; done
compare_named v3-1 v3w-1 v3wp-1 v3-2 v3w-2 v3wp-2 q-1 qw-1 q-2 qw-2 q-3 qw-3 v3b-1 v3bw-1 v3b-2 v3bw-2 v3s-1 v3sw-1 v3s-2 v3sw-2 > /dev/null
cat $OUT/stages.md
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
