#!/usr/bin/env python3
"""One line per point of a bench JSON record: gate/up, down and routed µs, under a label (the schedule or
switch the record ran with). usage: schedule_table.py RECORD.json LABEL"""
import json
import sys


def main(path, label):
    record = json.load(open(path, encoding="utf-8"))
    for p in record["points"]:
        print(f"{label:48s} T={p['tokens']:6d}  gate/up {p['gate_up_us']:9.1f} µs  down {p['down_us']:9.1f} µs"
              f"  routed {p['routed_us']:9.1f} µs")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
