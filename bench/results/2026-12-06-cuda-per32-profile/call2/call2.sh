#!/usr/bin/env bash
# Call 2, at $1 with pair.patch applied: (a) paired 64-token FP4 x e4m3 CTAs (STEADYMOE_FP4_PAIRED_ROWS=1: the
# two CTAs of an n-tile in a cluster, each copying half of every token tile into both) — the FP4 grouped GEMM
# tests and the layer suite with them on, memcheck on the per-32 test, then deepseek-v4-flash fp4 (per-32, the
# default) at 16384 and 4096 tokens, paired against not (the patch's default), alternating; (b) what bounds the
# unpaired kernel: the profiler's sections and sampled stalls per SASS instruction on the first two launches of
# decode_kernel_rows_by_map at 16384 tokens (the routed gate/up, then the routed down GEMM). Also
# test_cuda_permutation, whose GroupTiles test (2ab73eb's tile choice) has not run on a GPU.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
here=bench/results/2026-12-06-cuda-per32-profile/call2
mkdir -p $OUT/t
source bench/device_tests.sh
P=STEADYMOE_FP4_PAIRED_ROWS=1
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
patch -s -p1 < $here/pair.patch || exit 1
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_permutation || exit 1
run_test test_cuda_permutation
run_test test_cuda_grouped_gemm "$P" "*Fp4*:*BlockExact*"
run_test test_cuda_grouped_gemm "" "*Fp4MeetingE4m3*"
run_test test_cuda_layer "$P"
STEADYMOE_FP4_PAIRED_ROWS=1 memcheck test_cuda_grouped_gemm "*Fp4MeetingE4m3*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=300
v4() { echo --workload deepseek-v4-flash --format fp4 --tokens $1 --trace; }
bench_run v4-16384 - $(v4 16384)
bench_run v4-16384-paired "$P" $(v4 16384)
bench_run v4-16384-2 - $(v4 16384)
bench_run v4-16384-paired-2 "$P" $(v4 16384)
bench_run v4-4096 - $(v4 4096)
bench_run v4-4096-paired "$P" $(v4 4096)
grep -E "^(===|16384 |4096 |\()" $OUT/bench.txt | cut -c1-250
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0]
ks=[(k['name'][k['name'].find('decode_kernel'):][:40], round(k['us'],1)) for k in p.get('kernel_trace',[]) if 'decode_kernel' in k['name']]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1), ks[:3])"; done
echo "bench done at $((SECONDS-start)) s"
ncu=/usr/local/cuda/bin/ncu
for run in gateup:0 down:1; do
  (( SECONDS - start < 420 )) || { echo "profile $run skipped"; continue; }
  name=${run%%:*}; skip=${run#*:}
  timeout 110 $ncu --clock-control none --kernel-name-base function --kernel-name regex:decode_kernel_rows_by_map \
    --launch-skip $skip --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats \
    --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --section SourceCounters -f -o $OUT/t/$name ./build-gpu/steadymoe bench --backend cuda \
    --workload deepseek-v4-flash --format fp4 --tokens 16384 --repeat 1 > $OUT/t/$name.log 2>&1
  echo "profile $name rc=$? at $((SECONDS-start)) s"
  $ncu --import $OUT/t/$name.ncu-rep --page details > $OUT/details-$name.txt 2>> $OUT/t/$name.log
  $ncu --import $OUT/t/$name.ncu-rep --page source --print-source sass --csv > $OUT/t/sass-$name.csv 2>> $OUT/t/$name.log
  python3 bench/sass_stalls.py $OUT/t/sass-$name.csv > $OUT/sass-$name.txt 2>&1
  grep -E "decode_kernel|Duration|Throughput|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Achieved Occupancy|Executed Instructions  " $OUT/details-$name.txt | cut -c1-160
  head -c 1500 $OUT/sass-$name.txt
done
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
