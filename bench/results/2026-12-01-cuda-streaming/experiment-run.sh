#!/usr/bin/env bash
# EXPERIMENT (not kept): per-CTA weight streaming of the Hopper grouped GEMM, six variants cycled per forward.
out=$1
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 || exit 1
cmake --build build-gpu -j "$(nproc)" --target steadymoe_cli >"$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -40; exit 1; }
echo built $(date)
SMOE_X_CYCLE=5 /usr/local/cuda/bin/ncu --clock-control none --csv --page details --kernel-name regex:grouped_gemm --launch-count 30 \
  --section SpeedOfLight ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 1 --repeat 6 \
  --graph-max-tokens 0 >"$out/x.csv" 2>"$out/x.err"
python3 - "$out/x.csv" <<'PY' | tee "$out/x.txt"
import csv,sys
rows=[l for l in open(sys.argv[1]) if l.startswith('"')]
d={}
for r in csv.DictReader(rows):
    if r["Metric Name"]=="Duration": d[int(r["ID"])]=(r["Grid Size"],r["Metric Value"])
names=["base","testwait","testwait_nomma","nomma","testwait2","base2"]
for v in range(6):
    print(f"{names[v]:14s}", " | ".join(f"{d[i][0]} {d[i][1]}" for i in range(5*v,5*v+5) if i in d))
PY
