#!/usr/bin/env bash
# Call 1 (commit in $1): the previous session's prepared call (bench/results/2026-12-06-cuda-tall-swiglu/
# next-call/next_call.sh: the suites with held-pairs.patch applied, base against patched on deepseek-v3 fp8 at
# 16384 tokens with traces) followed by the profiler's DRAM / L2 bytes and tensor-pipe share of deepseek-v3's
# two routed GEMMs at HEAD, where the gate/up now runs in weight pairs (1ee944c).
set -u
call_start=$SECONDS
bash bench/results/2026-12-06-cuda-tall-swiglu/next-call/next_call.sh "$1"
rc=$?
start=$SECONDS
mkdir -p $OUT/p
ncu=/usr/local/cuda/bin/ncu
m='dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x'
[[ $rc == 0 ]] && STEADYMOE_SHARED_FORK=after timeout $((585 - (SECONDS - call_start))) $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90_kernel \
  --launch-skip 1 --launch-count 2 --metrics "$m" --csv ./build-gpu/steadymoe bench --backend cuda \
  --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 > $OUT/p/ncu.csv 2>&1
echo "== ncu rc=$? in $((SECONDS - start)) s"
python3 - $OUT/p/ncu.csv <<'PY' | tee $OUT/counters.txt
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; idx = {k: head.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")}
per = collections.OrderedDict()
for r in rows[1:]:
    per.setdefault(r[idx["ID"]], {"name": r[idx["Kernel Name"]][56:100]})[r[idx["Metric Name"]]] = r[idx["Metric Value"]] + " " + r[idx["Metric Unit"]]
for i, d in per.items():
    print(i, " | ".join(f"{k.split('.')[0].replace('sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active','tensor')}={v}" for k, v in d.items()))
PY
cd $OUT && tar czf p.tgz p && rm -rf p
# deepseek-v3 at one token: each kernel's own duration with nothing beside it (the profiler runs kernels one at
# a time), against the traces' as-served spans (route_wide_and_permute_kernel ends 7.9 µs after the router's GEMM)
cd - > /dev/null
mkdir -p $OUT/q
left=$((590 - (SECONDS - call_start)))
(( left > 20 )) && timeout $left $ncu --clock-control none --kernel-name regex:"route|quantise|combine|permute|decode_kernel|shared_kernel" --launch-skip 30 --launch-count 24 --metrics gpu__time_duration.sum --csv \
  ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 1 --repeat 1 > $OUT/q/ncu1.csv 2>&1
echo "== ncu one token rc=$?"
python3 - $OUT/q/ncu1.csv <<'PY' | tee $OUT/one-token.txt
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; k = head.index("Kernel Name"); v = head.index("Metric Value"); g = head.index("Grid Size") if "Grid Size" in head else None
for r in rows[1:]:
    print(r[k].split("(")[0][:70], r[g] if g is not None else "", r[v], "ns")
PY
cd $OUT && tar czf q.tgz q && rm -rf q
