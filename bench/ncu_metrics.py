#!/usr/bin/env python3
"""One line per profiled kernel from a hardware-counter CSV (details page): its template arguments, grid and
the value of every metric asked for with --metrics (or of the metrics named on the command line).
usage: ncu_metrics.py FILE.csv [METRIC ...]"""
import csv
import sys


def main(path, wanted):
    rows = [line for line in open(path, encoding="utf-8", errors="replace") if line.startswith('"')]
    kernels = {}
    for r in csv.DictReader(rows):
        k = kernels.setdefault(r["ID"], {"name": r["Kernel Name"], "grid": r.get("Grid Size", ""), "m": {}})
        k["m"][r["Metric Name"]] = f'{r["Metric Value"]} {r["Metric Unit"]}'.strip()
    for kid, k in kernels.items():
        name = k["name"]
        args = name[name.find("<"):name.find(">") + 1] if "<" in name else name.split("(")[0]
        metrics = {m: v for m, v in k["m"].items() if not wanted or any(w in m for w in wanted)}
        print(f"{kid:>3} {args} grid {k['grid']}")
        for m, v in metrics.items():
            print(f"      {m}: {v}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
