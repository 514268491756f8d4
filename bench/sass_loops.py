#!/usr/bin/env python3
"""The k loop of each kernel in a SASS listing, without a GPU: per function (those whose name contains FILTER, if
given), the smallest loop that holds all of its MMAs (else the smallest that holds some, flagged) — its first and
last instruction, how many instructions it holds, and of which kinds — so that its length can be compared across
two builds of a change before any device time is spent on it. `--all` lists every backward branch's span instead
(a producer's stage loop, an epilogue's), those closed by a predicated branch first, largest first.

The listing is `cuobjdump -sass FILE.cubin` or `nvdisasm -c FILE.cubin` (bench/sass_listing.py);
bench/local_sass.sh makes one from a source file here with the build's device flags.
usage: sass_loops.py LISTING [FILTER] [--all]"""
import collections
import re
import sys

from sass_listing import functions, short_name

BRANCH = re.compile(r"\bBRA(?:\.\S+)?\s+(?:`\()?(\.L_x_\d+|0x[0-9a-f]+)")
OPCODE = re.compile(r"^(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
KINDS = {  # opcode -> the column it counts in
    "FFMA": "fp32", "FMUL": "fp32", "FADD": "fp32", "FMNMX": "fp32", "FSEL": "fp32", "FSETP": "fp32",
    "IMAD": "int", "IADD3": "int", "LOP3": "int", "SHF": "int", "LEA": "int", "VIADD": "int", "PRMT": "int",
    "ISETP": "int", "SEL": "int", "IMNMX": "int", "VIMNMX": "int", "IABS": "int", "F2FP": "convert",
    "F2I": "convert", "I2F": "convert", "I2FP": "convert", "F2F": "convert",
    "LDS": "shared", "STS": "shared", "LDSM": "shared", "LDG": "global", "STG": "global",
    "QGMMA": "mma", "HGMMA": "mma", "HMMA": "mma", "WARPGROUP": "mma",
}
COLUMNS = ("fp32", "int", "convert", "shared", "global", "mma", "other")


def loops(body, labels):
    """{(first address, last address): closed by a predicated branch} of each backward branch's span, those
    closed by a predicated branch first (a loop the compiler rotated tests at its bottom; an unpredicated branch
    back is mostly a retry stub, such as a barrier's try-wait placed after the function's body, returning into
    it), largest first."""
    spans = {}
    for address, text in body:
        branch = BRANCH.search(text)
        if not branch:
            continue
        target = branch.group(1)
        target = labels.get(target) if target.startswith(".L") else int(target, 16)
        if target is not None and target <= address:
            spans[(target, address)] = text.lstrip().startswith("@")
    return {s: spans[s] for s in sorted(spans, key=lambda s: (not spans[s], s[0] - s[1], s[0]))}


def kinds(body, first, last):
    counts = collections.Counter()
    for address, text in body:
        if first <= address <= last:
            opcode = OPCODE.match(text)
            counts[KINDS.get(opcode.group(1), "other") if opcode else "other"] += 1
    return counts


def k_loop(body, spans):
    """The smallest span closed by a predicated branch that holds all of the function's MMAs (a stage loop
    whose blocks' MMAs are unrolled in it), else the smallest that holds any (flagged by the caller): None
    where no such span holds one."""
    mma_at = [a for a, text in body if "GMMA" in text or "HMMA" in text]
    closed = sorted((s for s in spans if spans[s]), key=lambda s: s[1] - s[0])
    holding = [s for s in closed if any(s[0] <= a <= s[1] for a in mma_at)]
    whole = [s for s in holding if all(s[0] <= a <= s[1] for a in mma_at)]
    if whole:
        return whole[0], True
    return (holding[0], False) if holding else (None, False)


def main(argv):
    every = "--all" in argv
    argv = [a for a in argv if a != "--all"]
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    wanted = argv[2] if len(argv) == 3 else ""
    print("| kernel | loop (addresses) | instructions | " + " | ".join(COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    for name, body, labels in functions(argv[1]):
        if wanted not in name:
            continue
        spans = loops(body, labels)
        chosen = [(s, True) for s in spans] if every else [k_loop(body, spans)]
        for span, whole in chosen:
            if span is None:
                print(f"| {short_name(name)} | no loop holds an MMA | | " + " | ".join("" for _ in COLUMNS) + " |")
                continue
            first, last = span
            counts = kinds(body, first, last)
            cells = " | ".join(str(counts[c]) for c in COLUMNS)
            where = f"{first:#06x}-{last:#06x}" + ("" if whole else " (some MMAs outside)")
            print(f"| {short_name(name)} | {where} | {sum(counts.values())} | {cells} |")


if __name__ == "__main__":
    main(sys.argv)
