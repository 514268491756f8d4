#!/usr/bin/env bash
# Session call 3: at $1 (the FP4 x e4m3 kernel with one bulk copy a stage). The codec, grouped-GEMM, tensor-core and
# layer tests; deepseek-v4-flash fp4 at 1 .. 16384 tokens; then where the kernel's time goes: the profiler's counters
# and per-instruction stall samples for the routed gate/up and down launches at 1 and at 128 tokens (cold caches,
# clocks not locked).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/p
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 > $OUT/p/build.log 2>&1 || { grep -E "error" -A5 $OUT/p/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in test_cuda_codecs test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
  echo "=== $t" >> $OUT/p/gpu-tests.log
  timeout 90 build-gpu/tests/$t >> $OUT/p/gpu-tests.log 2>&1; echo "$t: rc=$?"
done
grep -E "^===|^\[  (PASSED|FAILED) |Failure|CTAs per SM|FP4|fp4|v4|Expected|Which is|actual" $OUT/p/gpu-tests.log | head -60
echo "tests done at $((SECONDS-start)) s"
./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384 --json $OUT/p/v4.json 2>&1 | grep -v "^\[bench"
echo "bench done at $((SECONDS-start)) s"
ncu=/usr/local/cuda/bin/ncu
for T in 1 128; do
  for skip in 0 1; do  # the routed gate/up launch, then the down
    name=fp4-T$T-$skip
    $ncu --clock-control none --kernel-name-base mangled --kernel-name regex:WeightCodeE2ELb1 --launch-skip $skip --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy --section MemoryWorkloadAnalysis \
      -f -o $OUT/p/$name ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens $T --repeat 1 > $OUT/p/$name.log 2>&1
    echo "== T=$T launch $skip: rc=$? at $((SECONDS-start)) s"
    $ncu --import $OUT/p/$name.ncu-rep --page details --csv > $OUT/p/$name-details.csv 2>/dev/null
    python3 bench/ncu_table.py $OUT/p/$name-details.csv
    $ncu --import $OUT/p/$name.ncu-rep --page details 2>/dev/null | grep -E "Duration|DRAM Throughput|Issue Slots Busy|Executed Ipc A|No Eligible|Active Warps Per|Eligible Warps|Registers Per|Achieved Occupancy|L2 Hit Rate |Mem Busy|Max Bandwidth|Grid Size" | head -20
    $ncu --import $OUT/p/$name.ncu-rep --page source --print-source sass --csv > $OUT/p/$name-sass.csv 2>/dev/null
    python3 bench/sass_stalls.py $OUT/p/$name-sass.csv 28
  done
done
cd $OUT && tar czf p.tgz p && rm -rf p
