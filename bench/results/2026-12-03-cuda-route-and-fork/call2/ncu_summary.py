#!/usr/bin/env python3
"""ncu_summary.py RAW.csv: one line per profiled kernel from `ncu --page raw --csv`: its name, duration,
issue-slot use, and its largest warp stall reasons (cycles per issued instruction)."""
import csv, sys

rows = list(csv.reader(open(sys.argv[1], newline="")))
head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
names, units, data = rows[head], rows[head + 1], rows[head + 2:]
col = {n: i for i, n in enumerate(names)}
stalls = [n for n in names if "issue_stalled" in n and "not_issued" not in n]
def num(r, n):
    try:
        return float(r[col[n]].replace(",", ""))
    except (KeyError, ValueError, IndexError):
        return float("nan")
for r in data:
    if len(r) < len(names):
        continue
    kernel = r[col.get("Kernel Name", 4)][:70]
    dur = num(r, "gpu__time_duration.sum")
    issue = num(r, "sm__inst_executed.avg.per_cycle_active")
    top = sorted(((num(r, s), s) for s in stalls), reverse=True)[:7]
    short = lambda s: s.replace("smsp__average_warps_issue_stalled_", "").replace("smsp__", "").replace(
        "_per_issue_active.ratio", "").replace("average_warp_latency_issue_stalled_", "lat:")
    parts = ", ".join(f"{short(s)} {v:.1f}" for v, s in top if v == v and v > 0.05)
    unit = units[col["gpu__time_duration.sum"]] if "gpu__time_duration.sum" in col else "?"
    us = dur / 1000 if unit == "nsecond" else dur * 1000 if unit == "msecond" else dur
    print(f"{kernel:70s} {us:8.2f} µs ipc {issue:.2f} | {parts}")
