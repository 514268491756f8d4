#!/usr/bin/env bash
# Call 7 (commit in $1): the profiler's DRAM / L2 bytes and tensor-pipe share of deepseek-v3's routed FP8 GEMMs at
# 16384 tokens (shared expert after), default against tall tiles; then tall tiles against the default on
# deepseek-v4-flash's FP8 experts at 16384 tokens and deepseek-v3 at 4096, and deepseek-v3 tall without weight pairs.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
source bench/bench_runs.sh
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli || exit 1
ncu=/usr/local/cuda/bin/ncu
m='dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x,launch__registers_per_thread'
for run in "default STEADYMOE_SHARED_FORK=after" "tall STEADYMOE_SHARED_FORK=after,STEADYMOE_TALL_TILES=1"; do
  set -- $run
  env ${2//,/ } timeout 120 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90_kernel --launch-skip 1 --launch-count 2 \
    --metrics "$m" --csv ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 \
    > $OUT/t/ncu-$1.csv 2>&1
  echo "== $1 (rc=$?, at $((SECONDS - start)) s)"
  python3 - $OUT/t/ncu-$1.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; idx = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[idx["ID"]], {"name": r[idx["Kernel Name"]][56:100]})[r[idx["Metric Name"]]] = r[idx["Metric Value"]] + " " + r[idx["Metric Unit"]]
for i, d in per.items():
    print(i, " | ".join(f"{k.split('.')[0].replace('sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active','tensor')}={v}" for k, v in d.items()))
PY
done > $OUT/counters.txt 2>&1
cat $OUT/counters.txt
BENCH_BUDGET_S=400
T=STEADYMOE_TALL_TILES=1
A=STEADYMOE_SHARED_FORK=after
v4="--workload deepseek-v4-flash --format fp8 --tokens 16384"
v3s="--workload deepseek-v3 --format fp8 --tokens 4096"
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
bench_run v4f8 $A $v4
bench_run v4f8-tall "$A $T" $v4
bench_run v3-4096 $A $v3s
bench_run v3-4096-tall "$A $T" $v3s
bench_run v3-tall-unpaired "$A $T STEADYMOE_WEIGHT_PAIRS=0" $v3
bench_run v3-tall "$A $T" $v3
bench_run v3 $A $v3
grep -E "^(===|16384 |4096 |\()" $OUT/bench.txt | cut -c1-330
for f in $OUT/t/*.json; do python3 -c "
import json; d=json.load(open('$f')); p=d['points'][0] if 'points' in d else d[0]
print('$f'.split('/')[-1], p.get('output_fnv1a'), round(p.get('routed_us'),1), round(p.get('gate_up_us'),1), round(p.get('down_us'),1))"; done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
