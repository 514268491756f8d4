#!/usr/bin/env python3
"""Whether a kernel's consumers release a block's stage before they fold it: in the SASS of every function
whose name holds PATTERN (`cuobjdump -sass OBJECT` or `nvdisasm -c`: bench/sass_listing.py), the fold's FFMAs
that lie between each wait for a block's MMAs (WARPGROUP.DEPBAR ... 0x0 followed by FFMAs) and the stage's
arrival (SYNCS.ARRIVE) after it.
usage: sass_release_order.py SASS.txt PATTERN"""
import re
import sys

from sass_listing import short_name
from sass_mma_check import functions  # (name, instructions) per function of the listing


def main(path, pattern, window=200):
    matched = 0
    for name, body in functions(path):
        if pattern not in name:
            continue
        matched += 1
        report = []
        for i, ins in enumerate(body):
            if "WARPGROUP.DEPBAR" not in ins or not ins.rstrip().endswith("0x0"):
                continue
            ffma_before, arrive = 0, None
            for j in range(i + 1, min(i + window, len(body))):
                if "SYNCS.ARRIVE" in body[j]:
                    arrive = j - i
                    break
                if "QGMMA" in body[j] or "HGMMA" in body[j] or "SYNCS.PHASECHK" in body[j]:
                    break
                ffma_before += "FFMA" in body[j]
            if arrive is not None:
                report.append(f"DEPBAR at {i}: arrival {arrive} instructions later, {ffma_before} FFMAs before it")
            elif ffma_before:
                report.append(f"DEPBAR at {i}: no arrival before the next MMA or wait (or within {window} "
                              f"instructions); {ffma_before} FFMAs follow it")
        print(short_name(name))
        for r in report:
            print("   ", r)
    if matched == 0:
        print(f"{path}: no function's name holds {pattern}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
