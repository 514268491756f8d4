#!/usr/bin/env python3
"""Side by side: the kernel traces of `steadymoe bench --backend cuda --trace --json` from runs of one call
(builds, or switches of one build). Per workload and token count, one line per kernel (name and blocks, as
`name xBLOCKS`), each run's end and time in µs from the forward's first start, then each run's span. Launches of
the same name and blocks are matched in order of start, which can pair different launches where two streams
start them in another order. A kernel a run did not launch shows as "-": a fused or dropped kernel, or a new one.
usage: compare_traces.py NAME=FILE.json [NAME=FILE.json ...]"""
import re
import sys

import compare_runs  # its reader of the records (this script's folder is on the path)


def short_name(name):
    """The kernel's name without namespaces, argument list or the words templates repeat."""
    name = re.sub(r"^void |steadymoe::cuda::|\(anonymous namespace\)::", "", name)
    depth, cut = 0, len(name)
    for i, c in enumerate(name):  # the argument list: the first "(" outside template brackets
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            cut = i
            break
    return re.sub(r"\(WeightCode\)", "w", name[:cut])


def keyed(trace):
    """(short name and blocks, n-th such launch) -> (end µs, µs), in order of start."""
    seen, out = {}, {}
    for k in sorted(trace, key=lambda k: k["start_us"]):
        n = f"{short_name(k['name'])} x{k.get('blocks', '?')}"
        seen[n] = seen.get(n, 0) + 1
        out[(n, seen[n])] = (k["start_us"] + k["us"], k["us"])
    return out


def main(specs):
    by_label = {}  # label -> [(run name, tokens -> trace)]
    for spec in specs:
        name, label, points = compare_runs.load(spec)
        traces = {tokens: p.get("kernel_trace") or [] for tokens, p in points.items()}
        by_label.setdefault(label, []).append((name, traces))
    for label, runs in by_label.items():
        tokens = sorted({t for _, traces in runs for t, trace in traces.items() if trace})
        for t in tokens:
            keyed_runs = [(name, keyed(traces.get(t, []))) for name, traces in runs]
            kernels = []
            for _, k in keyed_runs:  # in order of end in the first run that launched each
                kernels += [key for key in sorted(k, key=lambda key: k[key][0]) if key not in kernels]
            print(f"## {label}, {t} tokens: end µs (µs) of each kernel as served\n")
            print("| kernel | " + " | ".join(name for name, _ in keyed_runs) + " |")
            print("|---|" + "---|" * len(keyed_runs))
            for key in kernels:
                cells = [f"{k[key][0]:.1f} ({k[key][1]:.1f})" if key in k else "-" for _, k in keyed_runs]
                shown = key[0] if key[1] == 1 else f"{key[0]} #{key[1]}"
                print(f"| {shown} | " + " | ".join(cells) + " |")
            spans = [f"{max(e for e, _ in k.values()):.1f}" if k else "-" for _, k in keyed_runs]
            print("| span | " + " | ".join(spans) + " |\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
