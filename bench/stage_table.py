#!/usr/bin/env python3
"""Each stage's time per run and point, from the records of `steadymoe bench --backend cuda --json`: the router,
the routed experts (their gate/up and down GEMMs), the shared expert beside them, the combine, the untimed layer
and its experts alone, in µs, with the output's digest; a Markdown table, one row per run and token count, runs
in the order given.
usage: stage_table.py NAME=FILE.json [NAME=FILE.json ...]"""
import sys

from compare_runs import load


def main(specs):
    if not specs:
        sys.exit(__doc__)
    print("| run | tokens | router | routed (gate/up + down) | shared | combine | untimed layer | experts | digest |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, _, points in map(load, specs):
        for tokens, p in sorted(points.items()):
            print(f"| {name} | {tokens} | {p['router_us']:.1f} | {p['routed_us']:.1f} ({p['gate_up_us']:.1f} + "
                  f"{p['down_us']:.1f}) | {p['shared_us']:.1f} | {p['combine_us']:.1f} | {p['layer_untimed_us']:.1f} | "
                  f"{p['experts_untimed_us']:.1f} | {p.get('output_fnv1a', '')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
