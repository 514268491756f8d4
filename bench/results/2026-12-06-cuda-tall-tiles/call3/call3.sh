#!/usr/bin/env bash
# Call 3 (commit in $1): initcheck on the block-major scale tests and the FP8 tensor-core layers; the profiler's
# DRAM / L2 bytes and tensor-pipe share of deepseek-v3's routed FP8 GEMMs at 16384 tokens (shared expert after):
# default (weight pairs on the gate/up), clusters of four, no clusters; then default against clusters of four,
# alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
source bench/bench_runs.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_gathers || exit 1
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for t in "test_cuda_grouped_gemm CudaGroupedGemm.BlockMajor*" "test_cuda_gathers CudaGathers.BlockMajor*" \
         "test_cuda_tensor_core Formats/CudaTensorCore.IsBitwiseBatchInvariant/fp8:Formats/CudaTensorCore.IsBitwiseBatchInvariant/fp4_fp8_block_exact"; do
  set -- $t
  timeout 150 $san --tool initcheck build-gpu/tests/$1 --gtest_filter="$2" > $OUT/t/initcheck-$1.log 2>&1
  echo "initcheck $1 $2: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/initcheck-$1.log | tail -1) $(grep -c '^\[       OK' $OUT/t/initcheck-$1.log) OK"
done
echo "initcheck done at $((SECONDS - start)) s"
ncu=/usr/local/cuda/bin/ncu
m='dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x'
for run in "default STEADYMOE_SHARED_FORK=after" "quads STEADYMOE_SHARED_FORK=after,STEADYMOE_QUAD_CTAS=1" "single STEADYMOE_SHARED_FORK=after,STEADYMOE_PAIRED_CTAS=0"; do
  set -- $run
  (( SECONDS - start > 330 )) && break
  env ${2//,/ } timeout 120 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90_kernel --launch-skip 0 --launch-count 4 \
    --metrics "$m" --csv ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 \
    > $OUT/t/ncu-$1.csv 2>&1
  echo "== $1 (rc=$?, at $((SECONDS - start)) s)"
  python3 - $OUT/t/ncu-$1.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; idx = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[idx["ID"]], {"name": r[idx["Kernel Name"]][:60]})[r[idx["Metric Name"]]] = r[idx["Metric Value"]] + " " + r[idx["Metric Unit"]]
for i, d in per.items():
    print(i, " | ".join(f"{k.split('.')[0].replace('sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active','tensor')}={v}" for k, v in d.items()))
PY
done > $OUT/counters.txt 2>&1
cat $OUT/counters.txt
BENCH_BUDGET_S=520
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
A=STEADYMOE_SHARED_FORK=after
bench_run v3 $A $v3
bench_run v3-quads "$A STEADYMOE_QUAD_CTAS=1" $v3
bench_run v3-quads2 "$A STEADYMOE_QUAD_CTAS=1" $v3
bench_run v3-2 $A $v3
grep -E "^(===|16384 |\()" $OUT/bench.txt | cut -c1-330
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
