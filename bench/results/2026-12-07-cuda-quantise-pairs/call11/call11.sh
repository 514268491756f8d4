#!/usr/bin/env bash
# The row quantiser at 16384 tokens of deepseek-v3 fp8 under the profiler: each of the first forward's four
# quantise_rows launches (the shared expert's rows, the routed tokens into their pairs' rows, the two SwiGLU
# outputs; launched one by one), throughput, memory, stall and source sections, one launch a run. Runs the
# carried CLI as it is (tar xzf build-carry-packed/programs.tar.gz first).
set -u
start=$SECONDS
cli=./build-carry/steadymoe
ncu=/usr/local/cuda/bin/ncu
mkdir -p $OUT/t
for i in 0 1 2 3; do
  $ncu --clock-control none --kernel-name regex:quantise_rows --launch-skip $i --launch-count 1 --warp-sampling-interval 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters \
    --section LaunchStats --section Occupancy -f -o $OUT/t/q$i $cli bench --backend cuda --workload deepseek-v3 --format fp8 \
    --tokens 16384 --repeat 1 --graph-max-tokens 0 > $OUT/t/q$i.log 2>&1
  $ncu --import $OUT/t/q$i.ncu-rep --page details --csv > $OUT/t/q$i-details.csv 2>> $OUT/t/q$i.log
  $ncu --import $OUT/t/q$i.ncu-rep --page details > $OUT/q$i-details.txt 2>> $OUT/t/q$i.log
  $ncu --import $OUT/t/q$i.ncu-rep --page source --print-source sass --csv > $OUT/t/q$i-source.csv 2>> $OUT/t/q$i.log
  echo "== launch $i at $((SECONDS-start)) s" >> $OUT/sass.txt
  python3 bench/sass_stalls.py $OUT/t/q$i-source.csv 25 >> $OUT/sass.txt 2>&1
done
grep -hE "quantise_rows_kernel|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Grid Size|Achieved Occupancy|Registers" $OUT/q*-details.txt
cd $OUT && tar czf t.tgz t && rm -rf t
echo "call done at $((SECONDS-start)) s"
