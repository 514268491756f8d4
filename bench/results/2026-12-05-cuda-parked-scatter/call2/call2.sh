#!/usr/bin/env bash
# Call 2 (s37; commit in $1): the profiler's DRAM and L2 bytes, duration and tensor-pipe share of deepseek-v3's routed
# FP8 GEMMs at 16384 tokens (the persistent kernel's launches after the first three: routed gate/up and down),
# pairs (default) against clusters of four (STEADYMOE_QUAD_CTAS=1); then qwen3's the same.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
ncu=/usr/local/cuda/bin/ncu
m='dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x'
for run in "v3-pairs STEADYMOE_UNSET=1 deepseek-v3 fp8" "v3-quads STEADYMOE_QUAD_CTAS=1 deepseek-v3 fp8"; do
  set -- $run
  (( SECONDS - start > 480 )) && break
  env $2 timeout 150 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 2 \
    --metrics "$m" --csv ./build-gpu/steadymoe bench --backend cuda --workload $3 --format $4 --tokens 16384 --repeat 1 \
    > $OUT/t/ncu-$1.csv 2>&1
  echo "== $1 (rc=$?, at $((SECONDS - start)) s)"
  grep -E "dram__bytes_read|lts__t_bytes|duration|hit_rate|tensor|throughput|launch__" $OUT/t/ncu-$1.csv | awk -F'","' '{print $5" | "$(NF-2)" "$(NF-1)" "$NF}' | cut -c1-200
done > $OUT/counters.txt 2>&1
cat $OUT/counters.txt
cd $OUT && tar czf t.tgz t && rm -rf t
