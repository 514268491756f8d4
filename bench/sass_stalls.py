#!/usr/bin/env python3
"""The instructions where a kernel's warps stall most, from the profiler's source page of one launch
(`ncu --import REPORT --page source --print-source sass --csv`): the sampled stalls per SASS instruction,
the largest first, with their share of all samples. usage: sass_stalls.py FILE.csv [ROWS]"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main(path, rows_wanted):
    lines = [line for line in open(path, encoding="utf-8", errors="replace") if line.startswith('"')]
    table = list(csv.DictReader(lines))
    if not table:
        print(f"{path}: no source rows")
        return
    columns = list(table[0].keys())
    # The sampling columns' names changed between profiler versions: take the "all samples" one if there
    # is one, else the first column that counts stall samples.
    sampled = [c for c in columns if "Sampling" in c and "All" in c] or [c for c in columns if "Sampl" in c]
    source = next((c for c in columns if c.strip().lower() == "source"), None)
    if not sampled or not source:
        print(f"{path}: no stall-sampling or source column among: {columns}")
        return
    samples = sampled[0]
    total = sum(number(r[samples]) for r in table) or 1.0
    print(f"{samples}: {total:.0f} samples over {len(table)} instructions")
    for r in sorted(table, key=lambda r: number(r[samples]), reverse=True)[:rows_wanted]:
        address = r.get("Address", r.get("#", ""))
        print(f"{100 * number(r[samples]) / total:6.2f}%  {address:>8}  {r[source].strip()[:110]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
