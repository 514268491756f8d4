#!/usr/bin/env python3
"""Each stage's time per run and point, from the records of `steadymoe bench --backend cuda --json`: the router,
the routed experts (their gate/up and down GEMMs), the shared expert beside them, the combine, the untimed layer
and its experts alone, in µs, with the output's digest; a Markdown table, one row per run and token count, runs
in the order given; a field a record lacks (an older build's) shows as -.
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
            # (records of older builds, run beside the new one, may lack a field)
            us = lambda key: f"{p[key]:.1f}" if key in p else "-"
            print(f"| {name} | {tokens} | {us('router_us')} | {us('routed_us')} ({us('gate_up_us')} + {us('down_us')}) | "
                  f"{us('shared_us')} | {us('combine_us')} | {us('layer_untimed_us')} | {us('experts_untimed_us')} | "
                  f"{p.get('output_fnv1a', '')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
