#!/usr/bin/env python3
"""Side by side: the records of `steadymoe bench --backend cuda --json` from runs of one call (builds, or
switches of one build), point by point. Per workload and token count, each run's routed, untimed-layer and
(where recorded) experts-alone µs, the routed experts' floor over their time, the untimed layer over the
experts, and the routed gate/up and down GEMMs' µs; after the first run, each time over the first run's;
then whether every run gave the same output bits per token count (where the records hold the output's
digest). Runs of the same name with `-again` or `-againN` appended (later rounds, alternating) are folded in
as medians.
usage: compare_runs.py NAME=FILE.json [NAME=FILE.json ...]"""
import json
import os
import re
import statistics
import sys


def load(spec):
    """NAME=FILE.json -> (name, "workload format", tokens -> point); also compare_traces.py's reader."""
    script = os.path.basename(sys.argv[0])
    name, sep, path = spec.partition("=")
    if not sep:
        sys.exit(f"{script}: {spec!r} is not NAME=FILE.json")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{script}: {path}: {e}")
    workload = record.get("workload", {})
    label = f"{workload.get('name', '?')} {workload.get('format', '?')}"
    return name, label, {p["tokens"]: p for p in record.get("points", [])}


def median_point(points):
    """Medians of the timed fields over repeated runs of one point."""
    keys = ("routed_us", "layer_untimed_us", "experts_untimed_us", "routed_untimed_us", "routed_floor_us", "gate_up_us",
            "down_us")
    return {k: statistics.median(p[k] for p in points) for k in keys if all(k in p for p in points)}


def main(specs):
    runs = {}  # (name, workload) -> tokens -> [points]
    order = []
    for spec in specs:
        name, label, points = load(spec)
        name = re.sub(r"-again\d*$", "", name)
        key = (name, label)
        if key not in runs:
            runs[key] = {}
            order.append(key)
        for tokens, p in points.items():
            runs[key].setdefault(tokens, []).append(p)
    for label in dict.fromkeys(lbl for _, lbl in order):
        names = [n for n, lbl in order if lbl == label]
        print(f"## {label}")
        print("| tokens | " + " | ".join(f"{n}: routed µs (floor/routed) / untimed / experts (untimed/experts) / gate/up + down / routed alone (floor/routed alone)" for n in names) + " |")
        print("|---" * (len(names) + 1) + "|")
        all_tokens = sorted({t for n in names for t in runs[(n, label)]})
        for tokens in all_tokens:
            cells, first = [], None
            for n in names:
                pts = runs[(n, label)].get(tokens)
                if not pts:
                    cells.append("—")
                    continue
                m = median_point(pts)
                routed, untimed, experts = m.get("routed_us"), m.get("layer_untimed_us"), m.get("experts_untimed_us")
                text = f"{routed:.1f} ({m['routed_floor_us'] / routed:.2f})" if routed else "—"
                text += f" / {untimed:.1f}" if untimed else " / —"
                text += f" / {experts:.1f} ({untimed / experts:.2f})" if experts and untimed else " / —"
                if m.get("gate_up_us") and m.get("down_us"):
                    text += f" / {m['gate_up_us']:.1f} + {m['down_us']:.1f}"
                if m.get("routed_untimed_us") and m.get("routed_floor_us"):  # (older records lack the first)
                    alone = m["routed_untimed_us"]
                    text += f" / alone {alone:.1f} ({m['routed_floor_us'] / alone:.2f})"
                if first is None:
                    first = m
                elif routed and first.get("routed_us"):
                    text += f"; routed ×{routed / first['routed_us']:.3f}"
                    if untimed and first.get("layer_untimed_us"):
                        text += f", untimed ×{untimed / first['layer_untimed_us']:.3f}"
                cells.append(text)
            print(f"| {tokens} | " + " | ".join(cells) + " |")
        # Runs that should give the same bits: the output digests of each point (where recorded) in one set.
        for tokens in all_tokens:
            digests = {p["output_fnv1a"] for n in names for p in runs[(n, label)].get(tokens, []) if "output_fnv1a" in p}
            if digests:
                print(f"- {tokens} tokens: " + ("every run's output has the same bits" if len(digests) == 1 else
                                                 f"the runs' outputs differ ({len(digests)} digests)"))
        print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
