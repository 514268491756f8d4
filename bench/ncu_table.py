#!/usr/bin/env python3
"""One line per profiled kernel from a hardware-counter CSV (details page): duration, DRAM bytes and
throughput, achieved occupancy and the four largest warp-stall reasons. usage: ncu_table.py FILE.csv"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main(path):
    rows = [line for line in open(path, encoding="utf-8", errors="replace") if line.startswith('"')]
    kernels = {}
    for r in csv.DictReader(rows):
        k = kernels.setdefault(r["ID"], {"name": r["Kernel Name"], "grid": r.get("Grid Size", ""), "m": {}})
        k["m"][(r["Section Name"], r["Metric Name"])] = (r["Metric Unit"], r["Metric Value"])
    for kid, k in kernels.items():
        m = k["m"]

        def get(section, metric):
            unit, value = m.get((section, metric), ("", ""))
            return f"{value} {unit}".strip()

        stalls = []
        for (section, metric), (unit, value) in m.items():
            if "issue_stalled_" in metric and metric.endswith("_per_issue_active.ratio"):
                v = number(value)
                if v is not None:
                    stalls.append((v, metric.split("issue_stalled_")[1].replace("_per_issue_active.ratio", "")))
        stalls.sort(reverse=True)
        name = k["name"].split("(")[0].replace("(anonymous namespace)::", "")[-60:]
        print(f"{kid:>4} {name:60s} grid {k['grid']:>12s} | {get('GPU Speed Of Light Throughput', 'Duration'):>12s} |"
              f" DRAM {get('GPU Speed Of Light Throughput', 'DRAM Throughput'):>8s}"
              f" {get('Memory Workload Analysis', 'Memory Throughput'):>14s} |"
              f" cycles/issue {get('Warp State Statistics', 'Warp Cycles Per Issued Instruction'):>6s} | "
              + ", ".join(f"{n} {v:.1f}" for v, n in stalls[:4]))


if __name__ == "__main__":
    main(sys.argv[1])
