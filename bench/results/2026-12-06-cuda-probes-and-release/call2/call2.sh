#!/usr/bin/env bash
# Call 2 (session 46, on call 1's warm machine) at $1: bench/probes/wgmma_operand_rate.cu with zeros and random
# operands, short and long runs (the clocks the tensor cores' power leaves); then deepseek-v3 fp8 at 16384 tokens
# with call 1's base CLI (built from $1) while nvidia-smi samples the SM clock and power every 50 ms.
set -u
start=$SECONDS
mkdir -p $OUT
export STEADYMOE_SOURCE_COMMIT=$1
nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -o wgmma_rate bench/probes/wgmma_operand_rate.cu 2>&1 | tail -5
timeout 120 ./wgmma_rate | tee $OUT/wgmma_rate.md
echo "probe done at $((SECONDS-start)) s"
ls -la build-base/steadymoe || exit 1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 50 > $OUT/smi.csv 2>&1 &
smi=$!
timeout 120 ./build-base/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 > $OUT/v3.txt 2>&1
kill $smi
grep -v "^\[bench" $OUT/v3.txt | tail -8
python3 - $OUT/smi.csv <<'PY'
import sys, csv
rows = [r for r in csv.reader(open(sys.argv[1])) if r and r[0][:1].isdigit()]
def num(x):
    try: return float(x.strip().split()[0])
    except: return None
busy = [r for r in rows if num(r[2]) and num(r[2]) > 300]
print(f"{len(rows)} samples, {len(busy)} above 300 W")
for name, i in (("SM MHz", 1), ("W", 2), ("C", 3)):
    v = sorted(num(r[i]) for r in busy if num(r[i]) is not None)
    if v: print(f"{name}: min {v[0]:.0f} median {v[len(v)//2]:.0f} max {v[-1]:.0f}")
from collections import Counter
print(Counter(r[4].strip() for r in busy).most_common(4))
PY
echo "call done at $((SECONDS-start)) s"
