#!/usr/bin/env bash
# Session call 1: the racecheck probe of the stage protocol, and hardware counters of the prefill GEMMs.
set -u
start=$SECONDS
nv=/usr/local/cuda/bin
{
  nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I include -o /tmp/probe bench/probes/racecheck_stage_protocol.cu && /tmp/probe
  echo "probe rc=$?"
  timeout 60 $nv/compute-sanitizer --tool racecheck /tmp/probe
  echo "racecheck rc=$?"
  timeout 60 $nv/compute-sanitizer --tool racecheck --racecheck-report all /tmp/probe | head -60
} > $OUT/probe.txt 2>&1
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1
cmake --build build-gpu -j 16 --target steadymoe > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "built at $((SECONDS-start)) s"
$nv/ncu --query-metrics 2>/dev/null | grep -i -E "gmma|tensor_op|shared" > $OUT/metric-names.txt
for spec in qwen3-30b-a3b:bf16 deepseek-v3:fp8; do
  wl=${spec%%:*}; fmt=${spec#*:}
  timeout 200 $nv/ncu --clock-control none --csv --page details --kernel-name regex:grouped_gemm_sm90 --launch-count 4 --set full \
    ./build-gpu/steadymoe bench --backend cuda --workload $wl --format $fmt --tokens 16384 --repeat 1 > $OUT/ncu-$wl.csv 2> $OUT/ncu-$wl.err
  echo "$wl ncu rc=$? at $((SECONDS-start)) s"
done
cd $OUT && tar czf raw.tgz ncu-*.csv ncu-*.err configure.log build.log && rm -f ncu-*.csv ncu-*.err configure.log build.log
