#!/usr/bin/env bash
# Prepared, not run: at $1, where deepseek-v4-flash's one-token routed FP4 GEMMs spend their time (0.46-0.47 of
# the memory floor on an H100, bench/results/2026-12-07-cuda-readme-figures.md). The profiler, clocks left alone,
# on the first two launches of the per-32 FP4 x e4m3 decode kernel's 8-token CTAs four to an SM (ThinFour,
# picked by its mangled name: the routed gate/up, then the down GEMM), launched eagerly: the scheduler's,
# warp-state, memory and source sections, then the sampled stalls per SASS instruction (bench/sass_stalls.py).
# Carried (`bash bench/carry_build.sh steadymoe_cli`) or built there.
source bench/call_common.sh "$1"
tests() { build_gpu steadymoe_cli || return 1; }
call_tests tests || exit 1
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for launch in 0 1; do
  name=v4-1-launch$launch
  timeout 200 "$ncu" --clock-control none --kernel-name-base mangled --kernel-name "regex:WeightCodeE2ELb1ELi8ELi0ELb0E" \
    --launch-skip $launch --launch-count 1 --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SpeedOfLight --section SourceCounters -f -o "$OUT/$name" \
    ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1 --repeat 1 \
    --graph-max-tokens 0 --json "$OUT/t/$name.json" > "$OUT/t/$name.log" 2>&1
  echo "$name profiled rc=$? at $((SECONDS - start)) s"
  "$ncu" --import "$OUT/$name.ncu-rep" --page source --print-source sass --csv > "$OUT/t/$name-sass.csv" 2>> "$OUT/t/$name.log"
  python3 bench/sass_stalls.py "$OUT/t/$name-sass.csv" 25 > "$OUT/$name-stalls.txt" 2>&1
  "$ncu" --import "$OUT/$name.ncu-rep" --page details --csv > "$OUT/$name-details.csv" 2>> "$OUT/t/$name.log"
  head -45 "$OUT/$name-stalls.txt"
  python3 bench/ncu_table.py "$OUT/$name-details.csv"
  python3 bench/ncu_metrics.py "$OUT/$name-details.csv" "Issue Slots Busy" "No Eligible" "Eligible Warps Per Scheduler" \
    "Active Warps Per Scheduler" "Warp Cycles Per Issued Instruction" "DRAM Throughput" "Duration"
done
rm -f "$OUT"/*.ncu-rep  # (large; the CSVs keep what the files above read)
call_end
