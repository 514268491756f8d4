#!/usr/bin/env python3
"""What the compiler made of each kernel's warpgroup MMAs, read from a SASS listing (`cuobjdump -sass
FILE.cubin` or `nvdisasm -c FILE.cubin`: bench/sass_listing.py), without a GPU. Per kernel (functions whose
name contains FILTER, if given), in the listing's order (branches are not followed):
- MMAs: the wgmma instructions (QGMMA / HGMMA), and how many are placeholders (`GMMA ... RZ, gdesc[URZ]`: the
  compiler's filler for a commit group left empty; where the source put an MMA in that group, it was dropped);
- early reads / early writes: instructions that read an MMA's accumulators before a `WARPGROUP.DEPBAR.LE
  gsb0, N` has let its commit group complete (groups end at the MMAs marked gsb0; N of them may stay
  pending), or that write its accumulators or register operands (its A fragment) while it may be in flight;
- fold order: the MMAs (numbered as issued) whose accumulators floating-point instructions read, in the
  order they start reading each. The MMAs a source folds in order should appear in that order: a necessary
  check, not a sufficient one (it does not follow each element's chain of operations).
usage: sass_mma_check.py LISTING [FILTER]"""
import re
import sys

import sass_listing

MMA = re.compile(r"(?:@!?U?P\w+\s+)?[QH]GMMA\.64x(\d+)x\d+\S*\s+(R\d+|RZ), (R\d+|gdesc)")
WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)")
DEST = re.compile(r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s+(?:U?P\w+, )?R(\d+)")  # (a predicate written first)
NOT_WRITES = ("ST", "RED", "ATOM", "SYNCS", "BAR", "BRA", "QGMMA", "HGMMA", "WARPGROUP")


def functions(path):
    for name, body, _ in sass_listing.functions(path):
        yield name, [text for _, text in body]


def written_registers(ins):
    dest = DEST.match(ins)
    if not dest or dest.group(1).startswith(NOT_WRITES):
        return set()
    width = 4 if ".128" in dest.group(1) else 2 if re.search(r"\.U?64\b|\.WIDE\b", dest.group(1)) else 1
    return set(range(int(dest.group(2)), int(dest.group(2)) + width))


def check(body):
    mmas = placeholders = early_reads = early_writes = 0
    open_group = []  # the MMAs since the last group's end: (mma, every register it uses)
    groups = []      # committed groups not known complete, oldest first
    writer = {}      # accumulator register -> (mma, complete)
    order = []
    for ins in body:
        mma = MMA.match(ins)
        if mma:
            acc = set()
            if mma.group(2) == "RZ":
                placeholders += 1
            else:
                first = int(mma.group(2)[1:])
                acc = set(range(first, first + int(mma.group(1)) // 2))
            used = set(acc)
            if mma.group(3).startswith("R"):
                used |= set(range(int(mma.group(3)[1:]), int(mma.group(3)[1:]) + 4))
            for r in acc:
                writer[r] = (mmas, False)
            open_group.append((mmas, used))
            mmas += 1
            if re.search(r"\bgsb0\s*$", ins):
                groups.append(open_group)
                open_group = []
            continue
        wait = WAIT.match(ins)
        if wait:
            keep = int(wait.group(1), 16)
            done = {m for group in groups[:len(groups) - keep] for m, _ in group}
            groups = groups[len(groups) - keep:] if keep else []
            writer = {r: (m, c or m in done) for r, (m, c) in writer.items()}
            continue
        operands = ins.split(",", 1)[1] if "," in ins else ""
        for r in map(int, re.findall(r"\bR(\d+)\b", operands)):
            if r in writer:
                m, complete = writer[r]
                early_reads += not complete
                if ins.startswith(("FFMA", "FMUL", "FADD")) and (not order or order[-1] != m):
                    order.append(m)
        written = written_registers(ins)
        in_flight = [used for group in groups for _, used in group] + [used for _, used in open_group]
        early_writes += sum(1 for used in in_flight if used & written)
        for r in written:
            writer.pop(r, None)
    return mmas, placeholders, early_reads, early_writes, order


def main(path, name_filter):
    for name, body in functions(path):
        if name_filter and name_filter not in name:
            continue
        mmas, placeholders, early_reads, early_writes, order = check(body)
        if mmas == 0:
            continue
        print(f"{name}\n  MMAs {mmas}, placeholders {placeholders}, early reads {early_reads}, "
              f"early writes {early_writes}; fold order {order}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
