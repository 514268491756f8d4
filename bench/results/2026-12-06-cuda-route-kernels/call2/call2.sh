#!/usr/bin/env bash
# Call 2 (commit in $1, route-shared landed): the routing and permutation suites, then where the warps of
# deepseek-v3's two routed prefill GEMMs (16384 tokens, shared expert after) wait: the profiler's warp-state
# section and its per-instruction stall samples (source counters), a report per GEMM, printed as tables
# (bench/ncu_stalls.py). The gate/up runs in weight pairs on tall tiles (1ee944c); call 1 of
# 2026-12-06-cuda-held-pairs put its tensor pipe at 59.7% busy with neither DRAM nor L2 saturated.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t $OUT/p
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_routing test_cuda_permutation || exit 1
run_test test_cuda_routing
run_test test_cuda_permutation
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
ncu=/usr/local/cuda/bin/ncu
# launch 0 of grouped_gemm_sm90_kernel is the router's GEMM, 1 the gate/up, 2 the down GEMM
for gemm in gateup:1 down:2; do
  name=${gemm%:*} skip=${gemm#*:}
  STEADYMOE_SHARED_FORK=after timeout 200 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90_kernel \
    --launch-skip $skip --launch-count 1 --section WarpStateStats --section SourceCounters --section SchedulerStats \
    --section SpeedOfLight --import-source no -f -o $OUT/p/$name ./build-gpu/steadymoe bench --backend cuda \
    --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/p/$name.log 2>&1
  echo "== ncu $name rc=$? at $((SECONDS - start)) s"
  $ncu -i $OUT/p/$name.ncu-rep --page raw --csv > $OUT/p/$name-raw.csv 2>&1
  $ncu -i $OUT/p/$name.ncu-rep --page source --csv --print-source sass > $OUT/p/$name-sass.csv 2>&1
  python3 bench/ncu_stalls.py $OUT/p/$name-raw.csv $OUT/p/$name-sass.csv 50 > $OUT/$name-stalls.txt 2>&1
  ls -la $OUT/p/$name.ncu-rep
  find $OUT/p -name "$name.ncu-rep" -size +20M -delete  # (the CSVs above hold what the tables need)
  head -70 $OUT/$name-stalls.txt
done
ls -la $OUT/p
cd $OUT && tar czf p.tgz p && rm -rf p && cd - > /dev/null
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
