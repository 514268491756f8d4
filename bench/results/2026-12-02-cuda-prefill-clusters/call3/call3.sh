#!/usr/bin/env bash
# Session call 3 (diagnostic): paired persistent launches ran about 2x slower. Grid, clusters and SM activity.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden
start=$SECONDS
nv=/usr/local/cuda/bin
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 --target steadymoe > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "built at $((SECONDS-start)) s"
b=./build-gpu/steadymoe
timeout 100 $nv/ncu --clock-control none --csv --page details --kernel-name "regex:grouped_gemm_sm90_kernel<.*, 1>" --launch-count 2 \
  --section LaunchStats --section Occupancy --section SpeedOfLight --metrics sm__cycles_active.min,sm__cycles_active.max,sm__ctas_launched.sum \
  $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 16384 --repeat 1 > $OUT/ncu.csv 2> $OUT/ncu.err
echo "ncu rc=$? at $((SECONDS-start)) s"
for v in "X=1" STEADYMOE_PAIRED_CTAS=0 STEADYMOE_PAIRED_CLUSTERS=66 STEADYMOE_PAIRED_CLUSTERS=33; do
  echo "=== $v"
  env $v timeout 60 $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 16384 2>&1 | grep -E "^16384"
done
echo "done at $((SECONDS-start)) s"
