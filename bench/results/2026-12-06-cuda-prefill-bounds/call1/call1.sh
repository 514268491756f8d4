#!/usr/bin/env bash
# Call 1 (session 45) at $1 plus probe.patch (diagnostic knobs, not kept): what bounds the persistent FP8 and bf16
# prefill GEMMs at 16384 tokens. STEADYMOE_PROBE=1: the producer copies nothing (the MMAs read stale stages);
# =2: the consumers wait and release each stage without MMAs or folds; =3: MMAs without folds; =4: each stage
# released before its fold (the same bits); =5: every tile reads expert 0's weights; =6: weight pairs' items two tile pairs at a time, column by column
# (the same bits). Event-timed bench, alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
patch -s -p1 < bench/tmp-call/s48/probe.patch || { echo 'probe.patch does not apply'; exit 1; }
source bench/device_tests.sh
build_gpu steadymoe_cli > $OUT/tests.txt 2>&1 || { cat $OUT/tests.txt; exit 1; }
cat $OUT/tests.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm --format=csv >> $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=420
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
bench_run v3a - "${v3[@]}"
bench_run v3p4 STEADYMOE_PROBE=4 "${v3[@]}"
bench_run v3p1 STEADYMOE_PROBE=1 "${v3[@]}"
bench_run v3p2 STEADYMOE_PROBE=2 "${v3[@]}"
bench_run v3p3 STEADYMOE_PROBE=3 "${v3[@]}"
bench_run v3p5 STEADYMOE_PROBE=5 "${v3[@]}"
bench_run v3p6 STEADYMOE_PROBE=6 "${v3[@]}"
bench_run v3b - "${v3[@]}"
bench_run v3p4b STEADYMOE_PROBE=4 "${v3[@]}"
bench_run v3p6b STEADYMOE_PROBE=6 "${v3[@]}"
bench_run q3a - "${q3[@]}"
bench_run q3p1 STEADYMOE_PROBE=1 "${q3[@]}"
bench_run q3p2 STEADYMOE_PROBE=2 "${q3[@]}"
bench_run q3p5 STEADYMOE_PROBE=5 "${q3[@]}"
bench_run q3b - "${q3[@]}"
compare_named v3a v3p4 v3p1 v3p2 v3p3 v3p5 v3p6 v3b v3p4b v3p6b > /dev/null
cp $OUT/compare.md $OUT/compare-v3.md; cp $OUT/stages.md $OUT/stages-v3.md
compare_named q3a q3p1 q3p2 q3p5 q3b > /dev/null
cp $OUT/compare.md $OUT/compare-q3.md; cp $OUT/stages.md $OUT/stages-q3.md
cat $OUT/stages-v3.md $OUT/stages-q3.md
echo "call done at $((SECONDS-start)) s"
rm -f $OUT/compare.md $OUT/stages.md
cd $OUT && tar czf t.tgz t && rm -rf t
