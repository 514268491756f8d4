#!/usr/bin/env bash
# Session call 3: the Automatic schedules checked and benchmarked; the gate/up kernel profiled.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
mkdir -p $OUT/b $OUT/n
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/n/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/n/build.log 2>&1 || { grep -A5 error $OUT/n/build.log | head -40; exit 1; }
for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer test_cli; do
  timeout 300 build-gpu/tests/$t > $OUT/n/$t.log 2>&1; echo "$t: rc=$?" >> $OUT/tests.txt
done
grep -hE "^\[  (PASSED|FAILED) |Failure|first at" $OUT/n/*.log >> $OUT/tests.txt
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
timeout 200 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,4096,16384 --json $OUT/b/q-auto.json 2>&1 | grep -v "^\[bench" > $OUT/bench.txt
timeout 150 python3 bench/gpu_peers.py $OUT/b/peers.json $OUT/b/q-auto.json > $OUT/peers.md 2>&1
echo "bench done at $((SECONDS-start)) s" >> $OUT/bench.txt
for sched in two-per-sm wide-persistent; do
  STEADYMOE_TILED_SCHEDULE=$sched timeout 150 /usr/local/cuda/bin/ncu --clock-control none --kernel-name regex:grouped_gemm_sm90_kernel --launch-count 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy \
    $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 16384 --repeat 1 > $OUT/n/ncu-$sched.txt 2>&1
  echo "ncu $sched rc=$? at $((SECONDS-start)) s" >> $OUT/bench.txt
done
cd $OUT && tar czf b.tgz b n && rm -rf b n
