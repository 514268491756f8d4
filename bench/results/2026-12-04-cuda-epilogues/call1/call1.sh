#!/usr/bin/env bash
# Call 1 (session 28) at $1 (main): memcheck and initcheck on the FP4 x e4m3 copies path; the profiler on
# deepseek-v3's routed FP8 GEMMs at 16384 tokens (counters and sampled stalls per SASS instruction); the same
# counters on deepseek-v4-flash's 64-token FP4 x e4m3 launches with copies.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm || exit 1
memcheck test_cuda_grouped_gemm '*Fp4MeetingE4m3*:*Indexed*'
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 120 $san --tool initcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Fp4MeetingE4m3*:*Indexed*' > $OUT/t/initcheck.log 2>&1
echo "initcheck: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/initcheck.log | tail -1)"
grep -h "PASSED\|FAILED" $OUT/t/initcheck.log $OUT/t/memcheck-*.log | head
echo "sanitizers done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
ncu=/usr/local/cuda/bin/ncu
m='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active\.avg\.pct_of_peak_sustained_elapsed|sm__pipe_fma_cycles_active\.avg\.pct_of_peak_sustained_elapsed|dram__bytes_read\.sum$|dram__bytes_write\.sum$|lts__t_bytes\.sum$|sm__cycles_elapsed\.avg$'
timeout 240 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters \
  --metrics "$m" -f -o $OUT/t/v3 ./build-gpu/steadymoe bench --backend cuda \
  --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/t/ncu-v3.log 2>&1
echo "profile v3 rc=$? at $((SECONDS-start)) s"
$ncu --import $OUT/t/v3.ncu-rep --csv --page details > $OUT/t/v3-details.csv 2>>$OUT/t/ncu-v3.log
python3 bench/ncu_metrics.py $OUT/t/v3-details.csv Duration Throughput "Issue Slots" pipe_tensor pipe_fma "Hit Rate" \
  stalled dram__bytes lts__t_bytes cycles_elapsed "Warp Cycles" > $OUT/counters.txt 2>&1
$ncu --import $OUT/t/v3.ncu-rep --page source --print-source sass --csv > $OUT/t/v3-source.csv 2>>$OUT/t/ncu-v3.log
python3 - $OUT/t/v3-source.csv <<'PY'
import sys
lines = open(sys.argv[1], encoding="utf-8", errors="replace").read().split("\n")
starts = [i for i, l in enumerate(lines) if l.startswith('"Kernel Name"')] + [len(lines)]
for n, (a, b) in enumerate(zip(starts, starts[1:])):
    open(f"{sys.argv[1]}.{n}", "w").write("\n".join(lines[a:b]) + "\n")
print(len(starts) - 1, "source tables")
PY
for f in $OUT/t/v3-source.csv.*; do echo "== $f" >> $OUT/sass.txt; python3 bench/sass_stalls.py $f 45 >> $OUT/sass.txt 2>&1; done
head -60 $OUT/counters.txt; head -40 $OUT/sass.txt | cut -c1-180
echo "v3 done at $((SECONDS-start)) s"
m4='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio|sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active\.avg\.pct_of_peak_sustained_elapsed|sm__pipe_fma_cycles_active\.avg\.pct_of_peak_sustained_elapsed|sm__inst_executed_pipe_tensor_op_gmma\.sum'
timeout 200 $ncu --clock-control none --kernel-name regex:decode_kernel --launch-skip 0 --launch-count 2 \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
  --metrics "$m4" --csv --page details ./build-gpu/steadymoe bench --backend cuda \
  --workload deepseek-v4-flash --format fp4 --tokens 16384 --repeat 1 > $OUT/t/ncu-v4.csv 2> $OUT/t/ncu-v4.log
echo "profile v4 rc=$? at $((SECONDS-start)) s"
echo "== v4 fp4 copies" >> $OUT/counters.txt
python3 bench/ncu_metrics.py $OUT/t/ncu-v4.csv Duration Throughput "Issue Slots" "Issued Ipc" pipe_tensor pipe_fma \
    "Hit Rate" stalled Occupancy "Warp Cycles" >> $OUT/counters.txt 2>&1
tail -50 $OUT/counters.txt
rm -f $OUT/t/v3-source.csv; [[ $(stat -c%s $OUT/t/v3.ncu-rep) -lt 14000000 ]] && mv $OUT/t/v3.ncu-rep $OUT/ || rm -f $OUT/t/v3.ncu-rep
cd $OUT && tar czf t.tgz t && rm -rf t
