#!/usr/bin/env bash
# Call 5 (s44; commit in $1; the call-6 profile of bench/results/2026-12-05-cuda-fold-behind, now with weight pairs): where the FP8 gate/up's warps wait, instruction by instruction: the profiler's
# warp-state sampling (SourceCounters, WarpStateStats) on deepseek-v3's routed grouped-GEMM launches at 16384
# tokens (weight pairs on the gate/up by default), exported per SASS instruction.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
source bench/device_tests.sh
build_gpu steadymoe_cli > $OUT/build.txt 2>&1 || { cat $OUT/build.txt; exit 1; }
cat $OUT/build.txt
ncu=/usr/local/cuda/bin/ncu
timeout 200 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 2 \
  --section SourceCounters --section WarpStateStats --section LaunchStats -o $OUT/t/stalls \
  ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/t/ncu.log 2>&1
echo "profile rc=$? at $((SECONDS-start)) s"; tail -5 $OUT/t/ncu.log
$ncu -i $OUT/t/stalls.ncu-rep --page details --csv > $OUT/t/details.csv 2> $OUT/t/details.err; echo "details rc=$?"
$ncu -i $OUT/t/stalls.ncu-rep --page source --csv --print-source sass > $OUT/t/source.csv 2> $OUT/t/source.err
echo "source rc=$? $(wc -l < $OUT/t/source.csv) lines"; head -c 600 $OUT/t/source.csv; cat $OUT/t/source.err | head -5
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
