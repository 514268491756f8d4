#!/usr/bin/env bash
# Call 4: the loop ladder probe with three consumer warpgroups (and two over five stages), twice.
set -u
start=$SECONDS
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
/usr/local/cuda/bin/nvcc -Iinclude -O3 -std=c++20 --generate-code=arch=compute_90a,code=[sm_90a] -Xptxas -v \
  bench/probes/fp8_loop_ladder.cu -o /tmp/ladder > $OUT/probe-build.txt 2>&1 || { tail -20 $OUT/probe-build.txt; exit 1; }
grep -c "0 bytes spill stores" $OUT/probe-build.txt
for run in 1 2; do echo "== run $run"; /tmp/ladder; done | tee $OUT/probe.txt
echo "call done at $((SECONDS - start)) s"
