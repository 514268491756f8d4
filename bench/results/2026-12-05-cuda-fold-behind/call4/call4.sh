#!/usr/bin/env bash
# Call 4 (s43; commit in $1): does the FP8 gate/up's pace follow the stages in flight? The default kernels
# (folds between, STEADYMOE_FOLD_BEHIND=0) against a build whose e4m3 parked-f32 kernels keep three stages where
# they have four (three.patch, applied here only); deepseek-v3 fp8 at 16384 tokens, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
build_gpu steadymoe_cli > $OUT/build.txt 2>&1 || { cat $OUT/build.txt; exit 1; }
mkdir -p /tmp/four && cp build-gpu/steadymoe /tmp/four/steadymoe
patch -p1 < bench/tmp-call/s43/three.patch || exit 1
build_gpu steadymoe_cli >> $OUT/build.txt 2>&1 || { cat $OUT/build.txt; exit 1; }
cat $OUT/build.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=420
off=STEADYMOE_FOLD_BEHIND=0
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
bench_run three $off "${v3[@]}"; BENCH_CLI=/tmp/four/steadymoe bench_run four $off "${v3[@]}"
BENCH_CLI=/tmp/four/steadymoe bench_run four2 $off "${v3[@]}"; bench_run three2 $off "${v3[@]}"
compare_named four three four2 three2
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
