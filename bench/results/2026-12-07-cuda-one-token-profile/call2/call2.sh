#!/usr/bin/env bash
# Where the one-token layer's time goes (H100 or H200), at $1: a trace of each workload's one-token forward
# as served (graph replay), then the profiler on single launches (cold caches, clocks as they are):
# every kernel of one forward launched one by one (--graph-max-tokens 0), with throughput, memory and stall
# sections (details page); and the sampled stalls per SASS instruction of qwen3's routed gate/up and its
# routing kernel, and deepseek-v4-flash's routed FP4 gate/up (8-token FP4 x e4m3 CTAs).
set -u
export STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
build_gpu steadymoe_cli || exit 1
cli=./build-gpu/steadymoe
ncu=/usr/local/cuda/bin/ncu
for spec in qwen3-30b-a3b:bf16 deepseek-v4-flash:fp4; do
  wl=${spec%%:*}; fmt=${spec#*:}
  $cli bench --backend cuda --workload $wl --format $fmt --tokens 1 --trace > $OUT/trace-$wl.txt 2>&1
  echo "trace $wl rc=$? at $((SECONDS-start)) s"
  $ncu --clock-control none --csv --page details --graph-profiling node --launch-count 12 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    --section Occupancy --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    $cli bench --backend cuda --workload $wl --format $fmt --tokens 1 --repeat 1 --graph-max-tokens 0 \
    > $OUT/t/ncu-$wl.csv 2> $OUT/t/ncu-$wl.err
  echo "ncu $wl rc=$? at $((SECONDS-start)) s"
  python3 bench/ncu_table.py $OUT/t/ncu-$wl.csv > $OUT/ncu-$wl.txt 2>&1
done
# name|workload|format|name base|kernel regex|launches to skip
sass() {
  $ncu --clock-control none --kernel-name-base $4 --kernel-name "regex:$5" --launch-skip $6 --launch-count 1 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats -f -o $OUT/t/sass-$1 \
    $cli bench --backend cuda --workload $2 --format $3 --tokens 1 --repeat 1 --graph-max-tokens 0 > $OUT/t/sass-$1.log 2>&1
  $ncu --import $OUT/t/sass-$1.ncu-rep --page source --print-source sass --csv > $OUT/t/sass-$1.csv 2>> $OUT/t/sass-$1.log
  echo "== $1 (rc=$?) at $((SECONDS-start)) s" >> $OUT/sass.txt
  python3 bench/sass_stalls.py $OUT/t/sass-$1.csv 40 >> $OUT/sass.txt 2>&1
}
sass q-gateup qwen3-30b-a3b bf16 function decode_kernel 1
sass q-route qwen3-30b-a3b bf16 function route_and_permute_kernel 0
sass v4-gateup deepseek-v4-flash fp4 mangled WeightCodeE2ELb1ELi8ELi6E 0
( cd $OUT && tar czf t.tgz t && rm -rf t )
cat $OUT/ncu-*.txt
grep -E "^  *[0-9]+ +s[0-9]|first start" $OUT/trace-*.txt
echo "call done at $((SECONDS-start)) s"
