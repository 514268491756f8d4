#!/usr/bin/env bash
# Call 2 (commit in $1, route-shared landed): the routing and permutation suites, then where the warps of
# deepseek-v3's two routed prefill GEMMs (16384 tokens, shared expert after: launches 2 and 3 of the layer's
# grouped GEMMs, the router's first) wait, as session 46's call 5 took them
# (bench/results/2026-12-06-cuda-probes-and-release/call5/call5.sh) but on today's kernels: the gate/up on tall
# tiles (three consumer warpgroups) in weight pairs with parked SwiGLU outputs (1ee944c), whose tensor pipe
# call 1 of 2026-12-06-cuda-held-pairs put at 59.7% busy with neither DRAM nor L2 saturated.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation || exit 1
run_test test_cuda_routing
run_test test_cuda_permutation
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
ncu=/usr/local/cuda/bin/ncu
m='sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg,smsp__cycles_active.avg,lts__t_bytes.sum,dram__bytes_read.sum'
STEADYMOE_SHARED_FORK=after timeout 300 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 \
  --launch-skip 1 --launch-count 2 --section WarpStateStats --section SourceCounters --metrics "$m" -f -o $OUT/t/p \
  ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/t/ncu.log 2>&1
echo "profile rc=$? at $((SECONDS-start)) s"
$ncu --import $OUT/t/p.ncu-rep --csv --page details > $OUT/t/p-details.csv 2>>$OUT/t/ncu.log
python3 bench/ncu_metrics.py $OUT/t/p-details.csv Duration pipe_tensor cycles_elapsed cycles_active lts__t_bytes dram__bytes "Warp Cycles" stalled > $OUT/counters.txt 2>&1
$ncu --import $OUT/t/p.ncu-rep --page source --print-source sass --csv > $OUT/t/p-source.csv 2>>$OUT/t/ncu.log
python3 - $OUT/t/p-source.csv <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().split("\n")
starts = [i for i, l in enumerate(lines) if l.startswith('"Kernel Name"')] + [len(lines)]
for n, (a, b) in enumerate(zip(starts, starts[1:])):
    open(f"{sys.argv[1]}.{n}", "w").write("\n".join(lines[a:b]) + "\n")
print(len(starts) - 1, "source tables")
PY
for f in $OUT/t/p-source.csv.*; do echo "== $f" >> $OUT/sass.txt; python3 bench/sass_stalls.py $f 40 >> $OUT/sass.txt 2>&1; done
head -30 $OUT/counters.txt
head -60 $OUT/sass.txt | cut -c1-220
echo "call done at $((SECONDS-start)) s"
rm -f $OUT/t/*.ncu-rep  # (the CSVs exported from them stay)
cd $OUT && tar czf t.tgz t && rm -rf t
