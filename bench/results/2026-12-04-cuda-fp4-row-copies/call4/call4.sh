#!/usr/bin/env bash
# Call 4 (session 26) at $1 (next/fp4-wide): the profiler's counters on deepseek-v4-flash's FP4 x e4m3 GEMMs at
# 16384 tokens (the routed gate/up and down, 64-token CTAs), main's three to an SM against four warpgroups sharing
# the tokens (STEADYMOE_FP4_WIDE_CTAS=quad): tensor pipe, issue slots, L2 and DRAM throughput, warp stalls.
set -u
export STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 --target steadymoe_cli > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
ncu=/usr/local/cuda/bin/ncu
m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active\.avg\.pct_of_peak_sustained_elapsed|sm__pipe_fma_cycles_active\.avg\.pct_of_peak_sustained_elapsed|sm__inst_executed_pipe_tensor_op_gmma\.sum' 
for run in "three:-" "quad:STEADYMOE_FP4_WIDE_CTAS=quad"; do
  name=${run%%:*}; knob=${run#*:}; [[ $knob == - ]] && knob=STEADYMOE_UNSET=1
  env $knob timeout 200 $ncu --clock-control none --kernel-name regex:decode_kernel --launch-skip 0 --launch-count 2 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
    --metrics "$m" --csv --page details ./build-gpu/steadymoe bench --backend cuda \
    --workload deepseek-v4-flash --format fp4 --tokens 16384 --repeat 1 > $OUT/t/ncu-$name.csv 2> $OUT/t/ncu-$name.log
  echo "profile $name rc=$? at $((SECONDS-start)) s"
  echo "== $name" >> $OUT/counters.txt
  python3 bench/ncu_metrics.py $OUT/t/ncu-$name.csv Duration Throughput "Issue Slots" "Issued Ipc" pipe_tensor pipe_fma \
    "Hit Rate" stalled Occupancy "Warp Cycles" >> $OUT/counters.txt 2>&1
done
cat $OUT/counters.txt | head -80
cd $OUT && tar czf t.tgz t && rm -rf t
