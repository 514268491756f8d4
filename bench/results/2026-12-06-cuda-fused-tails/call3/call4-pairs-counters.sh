#!/usr/bin/env bash
# Call 4 (commit in $1; the prefill kernels are 053a0f5's): deepseek-v4-flash bf16 at 16384 tokens by default
# (weight pairs on its 8 KiB gate/up) against STEADYMOE_WEIGHT_PAIRS=0, alternating — the default never measured;
# then the profiler's L2 bytes and tensor-pipe busy cycles of deepseek-v3's FP8 gate/up at 16384 tokens in weight
# pairs and in clusters of four.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
build_gpu steadymoe_cli > $OUT/tests.txt 2>&1 || { cat $OUT/tests.txt; exit 1; }
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=150
v4b=(--workload deepseek-v4-flash --format bf16 --tokens 16384); O=STEADYMOE_WEIGHT_PAIRS=0
bench_run v4b - "${v4b[@]}"; bench_run v4boff $O "${v4b[@]}"; bench_run v4boff2 $O "${v4b[@]}"; bench_run v4b2 - "${v4b[@]}"
compare_named v4b v4boff v4boff2 v4b2 > /dev/null
cat $OUT/compare.md
ncu=/usr/local/cuda/bin/ncu
profile() {  # KNOB TAG METRICS
  env $1 timeout 70 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --metrics "$3" --csv --page details ./build-gpu/steadymoe bench --backend cuda \
    --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/t/ncu-$2.csv 2> $OUT/t/ncu-$2.err
  local rc=$?
  echo "== $1 (rc=$rc at $((SECONDS-start)) s)" >> $OUT/counters.txt
  python3 bench/ncu_metrics.py $OUT/t/ncu-$2.csv >> $OUT/counters.txt 2>&1
  return $rc
}
M=lts__t_bytes.sum,lts__t_bytes.sum.per_second,dram__bytes_read.sum,launch__cluster_dim_x,launch__grid_size,sm__cycles_active.avg
for quad in 0 1; do
  (( SECONDS - start > 330 )) && { echo "(quad=$quad profile skipped)" >> $OUT/counters.txt; continue; }
  profile STEADYMOE_QUAD_CTAS=$quad quad$quad "$M,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active" ||
    { (( SECONDS - start < 360 )) && profile STEADYMOE_QUAD_CTAS=$quad quad$quad-plain "$M"; }
done
cat $OUT/counters.txt 2>/dev/null
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
