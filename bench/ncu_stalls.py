#!/usr/bin/env python3
"""Where one profiled kernel's warps wait, from two CSV pages of a report taken with the WarpStateStats and
SourceCounters sections:
- RAW.csv (`ncu -i R --page raw --csv`): every stall metric the sections took (warp-state ratios, sampled
  stall reasons summed over the kernel), largest first;
- SASS.csv (`ncu -i R --page source --csv --print-source sass`): the instructions holding the most stall
  samples, each with its opcode class, and the samples per class.
usage: ncu_stalls.py RAW.csv SASS.csv [TOP]"""
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def csv_rows(path, must_have):
    """The CSV rows from the first line that holds every name in must_have (the profiler prints other lines
    before the table)."""
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    for i, line in enumerate(lines):
        if all(name in line for name in must_have):
            return list(csv.reader(lines[i:]))
    return []


def raw_stalls(path):
    rows = csv_rows(path, ["Kernel Name"])
    if len(rows) < 3:
        print(f"{path}: no raw table")
        return
    head, values = rows[0], rows[2]  # row 1 holds the units
    stalled = []  # every stall metric the sections took: warp-state ratios and sampled counts alike
    for name, value in zip(head, values):
        v = number(value)
        if v is not None and "stalled" in name:
            stalled.append((v, name))
    stalled.sort(reverse=True)
    print("## stall metrics, largest first")
    for v, n in stalled[:40]:
        print(f"  {n:90s} {v:14.2f}")
    for name, value in zip(head, values):
        if name in ("gpu__time_duration.sum", "smsp__cycles_active.avg", "sm__warps_active.avg.pct_of_peak_sustained_active",
                    "smsp__issue_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
                    "sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active"):
            print(f"  {name}: {value}")


def opcode_class(source):
    op = source.strip().split()
    op = [w for w in op if not w.startswith("@")]
    word = op[0] if op else "?"
    for prefix, cls in (("HGMMA", "wgmma"), ("QGMMA", "wgmma"), ("WARPGROUP.DEPBAR", "wgmma wait"),
                        ("WARPGROUP.ARRIVE", "wgmma fence"), ("SYNCS.PHASECHK", "mbarrier wait"),
                        ("SYNCS.ARRIVE", "mbarrier arrive"), ("SYNCS", "mbarrier other"), ("BAR", "named barrier"),
                        ("UTMALDG", "tensor copy"), ("UBLKCP", "bulk copy"), ("LDS", "shared load"),
                        ("STS", "shared store"), ("LDG", "global load"), ("STG", "global store"),
                        ("FFMA", "fp32 math"), ("FMUL", "fp32 math"), ("FADD", "fp32 math"), ("F2F", "convert"),
                        ("F2FP", "convert"), ("BRA", "branch"), ("WARPSYNC", "warp sync"), ("NANOSLEEP", "sleep")):
        if word.startswith(prefix):
            return cls
    return word.split(".")[0]


def sass_stalls(path, top):
    rows = csv_rows(path, ["Address", "Source"])
    if len(rows) < 2:
        print(f"{path}: no source table")
        return
    head = rows[0]
    col = {n: i for i, n in enumerate(head)}
    all_col = next((n for n in head if n.startswith("Warp Stall Sampling (All")), None)
    not_issued = next((n for n in head if n.startswith("Warp Stall Sampling (Not")), None)
    executed = next((n for n in head if n.startswith("Instructions Executed")), None)
    if all_col is None:
        print(f"{path}: no stall-sampling column; columns: {head}")
        return
    reason_cols = [n for n in head if re.match(r"^(stall_|smsp__pcsamp_warps_issue_stalled_)", n)]
    code = []
    for r in rows[1:]:
        if len(r) != len(head):
            continue
        code.append(r)
    total = sum(number(r[col[all_col]]) or 0 for r in code) or 1.0
    print(f"## {len(code)} instructions, {total:.0f} samples ({all_col})")
    by_class = {}
    for r in code:
        c = opcode_class(r[col["Source"]])
        by_class[c] = by_class.get(c, 0) + (number(r[col[all_col]]) or 0)
    print("## samples by opcode class")
    for c, v in sorted(by_class.items(), key=lambda x: -x[1])[:16]:
        print(f"  {c:18s} {v:10.0f}  {100 * v / total:5.1f}%")
    print(f"## the {top} instructions with the most samples (index, address, samples, % , not issued, executed)")
    order = sorted(range(len(code)), key=lambda i: -(number(code[i][col[all_col]]) or 0))
    for i in order[:top]:
        r = code[i]
        reasons = sorted(((number(r[col[n]]) or 0, n) for n in reason_cols), reverse=True)[:3]
        why = ", ".join(f"{n.replace('smsp__pcsamp_warps_issue_stalled_', '')} {v:.0f}" for v, n in reasons if v > 0)
        v = number(r[col[all_col]]) or 0
        print(f"  {i:5d} {r[col['Address']]:>8s} {v:8.0f} {100 * v / total:5.1f}%"
              f" {r[col[not_issued]] if not_issued else '':>8s} {r[col[executed]] if executed else '':>10s}"
              f"  {r[col['Source']].strip()[:70]:70s} {why}")


if __name__ == "__main__":
    raw_stalls(sys.argv[1])
    sass_stalls(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 40)
