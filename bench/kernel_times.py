#!/usr/bin/env python3
"""GPU time per kernel from a profiler CSV with the gpu__time_duration.sum metric: one line per kernel
(template arguments shortened), its launches, total and mean time, largest total first.
usage: kernel_times.py FILE.csv"""
import csv
import sys

UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def main(path):
    rows = [line for line in open(path, encoding="utf-8", errors="replace") if line.startswith('"')]
    totals = {}
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        if r["Metric Unit"] not in UNITS:
            sys.exit(f"kernel_times.py: unknown time unit {r['Metric Unit']!r} in {path}")
        us = float(r["Metric Value"].replace(",", "")) * UNITS[r["Metric Unit"]]
        name = r["Kernel Name"].replace("(anonymous namespace)::", "").replace("steadymoe::cuda::", "")
        name = name.split("(")[0] if name.count("<") == 0 else name[:110]
        count, total = totals.get(name, (0, 0.0))
        totals[name] = (count + 1, total + us)
    print(f"{'total µs':>12} {'launches':>8} {'mean µs':>10}  kernel")
    for name, (count, total) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{total:12.1f} {count:8d} {total / count:10.1f}  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
