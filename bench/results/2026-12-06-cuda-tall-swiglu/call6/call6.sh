#!/usr/bin/env bash
# Call 6 (commit in $1): the tree as kept (block-exact FP4 weights' tall tiles taken back; tall tiles park the
# gate/up's SwiGLU outputs). The grouped GEMM, tensor-core and layer suites whole; then where deepseek-v3's
# routed experts spend their time at 16384 tokens (shared expert after): the kernel trace, and the profiler's
# DRAM / L2 bytes and tensor-pipe share of its two routed GEMMs.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
run_test test_cuda_layer
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=400
A=STEADYMOE_SHARED_FORK=after
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
bench_run v3-trace $A $v3 --trace
sed -n '/^kernel/,$p' $OUT/t/v3-trace.log | head -40
ncu=/usr/local/cuda/bin/ncu
m='dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x'
env $A timeout 120 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90_kernel --launch-skip 1 --launch-count 2 \
  --metrics "$m" --csv ./build-gpu/steadymoe bench --backend cuda $v3 --repeat 1 > $OUT/t/ncu.csv 2>&1
echo "== ncu rc=$? at $((SECONDS - start)) s"
python3 - $OUT/t/ncu.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; idx = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[idx["ID"]], {"name": r[idx["Kernel Name"]][56:100]})[r[idx["Metric Name"]]] = r[idx["Metric Value"]] + " " + r[idx["Metric Unit"]]
for i, d in per.items():
    print(i, " | ".join(f"{k.split('.')[0].replace('sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active','tensor')}={v}" for k, v in d.items()))
PY
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
