#!/usr/bin/env bash
# Call 5 (session 46, right after call 4, on call 3's warm machine: its build, with probe.patch) at $1: the profiler's counters and
# warp-state samples per SASS instruction of deepseek-v3's routed gate/up and down launches at 16384 tokens
# (the shared expert after them: launches 2 and 3 of the layer's grouped GEMMs, the router's first), as the code
# runs them (STEADYMOE_PROBE=0) and with no copies and no folds (=7).
set -u
start=$SECONDS
mkdir -p $OUT/t
export STEADYMOE_SOURCE_COMMIT=$1
ncu=/usr/local/cuda/bin/ncu
m='sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg,smsp__cycles_active.avg,lts__t_bytes.sum,dram__bytes_read.sum'
for p in 0; do
  STEADYMOE_SHARED_FORK=after STEADYMOE_PROBE=$p timeout 110 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 \
    --launch-skip 1 --launch-count 2 --section WarpStateStats --section SourceCounters --metrics "$m" -f -o $OUT/t/p$p \
    ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/t/ncu-p$p.log 2>&1
  echo "profile p$p rc=$? at $((SECONDS-start)) s"
  $ncu --import $OUT/t/p$p.ncu-rep --csv --page details > $OUT/t/p$p-details.csv 2>>$OUT/t/ncu-p$p.log
  python3 bench/ncu_metrics.py $OUT/t/p$p-details.csv Duration pipe_tensor cycles_elapsed cycles_active lts__t_bytes dram__bytes "Warp Cycles" stalled > $OUT/counters-p$p.txt 2>&1
  $ncu --import $OUT/t/p$p.ncu-rep --page source --print-source sass --csv > $OUT/t/p$p-source.csv 2>>$OUT/t/ncu-p$p.log
  python3 - $OUT/t/p$p-source.csv <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().split("\n")
starts = [i for i, l in enumerate(lines) if l.startswith('"Kernel Name"')] + [len(lines)]
for n, (a, b) in enumerate(zip(starts, starts[1:])):
    open(f"{sys.argv[1]}.{n}", "w").write("\n".join(lines[a:b]) + "\n")
print(len(starts) - 1, "source tables")
PY
  for f in $OUT/t/p$p-source.csv.*; do echo "== $f" >> $OUT/sass-p$p.txt; python3 bench/sass_stalls.py $f 30 >> $OUT/sass-p$p.txt 2>&1; done
  head -30 $OUT/counters-p$p.txt
  head -45 $OUT/sass-p$p.txt | cut -c1-200
done
echo "call done at $((SECONDS-start)) s"
rm -f $OUT/t/*.ncu-rep  # (the CSVs exported from them stay)
cd $OUT && tar czf t.tgz t && rm -rf t
