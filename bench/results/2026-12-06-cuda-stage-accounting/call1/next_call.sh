#!/usr/bin/env bash
# Prepared in session 47 (its device time ran out before it ran): at $1 plus landed-counts.patch (diagnostic: in the parked FP8 tiled kernels, each CTA's
# first consumer thread counts the blocks whose stage had not landed when the loop came to it; the counts are
# summed over every launch of the process and printed at its exit). deepseek-v3 fp8 at 16384 tokens, with the
# shared expert after and as served. First the loop ladder with probe-uniform.patch (its rows with the
# descriptors kept in uniform registers, as the kernels keep them), twice.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
patch -s -p1 < bench/results/2026-12-06-cuda-loop-ladder/next-call/landed-counts.patch || { echo 'landed-counts.patch does not apply'; exit 1; }
patch -s -p1 < bench/results/2026-12-06-cuda-loop-ladder/next-call/probe-uniform.patch || { echo 'probe-uniform.patch does not apply'; exit 1; }
source bench/device_tests.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli probe_fp8_loop_ladder || exit 1
for r in 1 2; do timeout 60 build-gpu/probes/probe_fp8_loop_ladder > $OUT/ladder-$r.md 2>&1; done
cat $OUT/ladder-1.md $OUT/ladder-2.md
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
for run in after served; do
  knob=STEADYMOE_UNSET=1; [[ $run == after ]] && knob=STEADYMOE_SHARED_FORK=after
  env $knob timeout 150 ./build-gpu/steadymoe bench --backend cuda "${v3[@]}" > $OUT/t/$run.log 2>&1
  echo "== $run: rc=$? at $((SECONDS-start)) s"
  grep "^16384 " $OUT/t/$run.log | cut -c1-200
  grep "^PROBE" $OUT/t/$run.log | sort | uniq -c
done | tee $OUT/landed.txt
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
