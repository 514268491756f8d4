#!/usr/bin/env python3
"""The instructions where a kernel's warps stall most, from the profiler's source page of one launch
(`ncu --import REPORT --page source --print-source sass --csv`): the sampled stalls per SASS instruction,
the largest first, with their share of all samples and their main reasons; then the reasons over the
whole kernel. usage: sass_stalls.py FILE.csv [ROWS]"""
import csv
import sys
from collections import Counter


def number(text):
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main(path, rows_wanted):
    lines = [line for line in open(path, encoding="utf-8", errors="replace") if line.startswith('"')]
    # The page opens with a line naming the kernel; the table's header is the line that names "Source".
    start = next((i for i, line in enumerate(lines) if '"Source"' in line), None)
    if start is None:
        print(f"{path}: no source table")
        return
    print(lines[0].strip()[:200])
    table = list(csv.DictReader(lines[start:]))
    columns = list(table[0].keys())
    sampled = [c for c in columns if c and "Sampling" in c and "All" in c] or [c for c in columns if c and "Sampl" in c]
    reasons = [c for c in columns if c and c.startswith("stall_") and "Not Issued" not in c]
    if not sampled:
        print(f"{path}: no stall-sampling column among: {columns}")
        return
    samples = sampled[0]
    total = sum(number(r[samples]) for r in table) or 1.0
    print(f"{samples}: {total:.0f} samples over {len(table)} instructions")
    by_reason = Counter()
    for r in table:
        for c in reasons:
            by_reason[c[6:]] += number(r[c])
    print("reasons: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in by_reason.most_common(8)))
    for r in sorted(table, key=lambda r: number(r[samples]), reverse=True)[:rows_wanted]:
        top = sorted(((number(r[c]), c[6:]) for c in reasons), reverse=True)[:2]
        why = " ".join(f"{k}:{100 * v / total:.1f}" for v, k in top if v > 0)
        print(f"{100 * number(r[samples]) / total:6.2f}%  {r.get('Address', ''):>8}  {r['Source'].strip()[:90]:<90}  {why}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
