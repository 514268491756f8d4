#!/usr/bin/env python3
"""Names the instructions behind compute-sanitizer racecheck's hazards.

usage: bench/racecheck_sass.py RACECHECK_LOG SASS_FILE...

Each SASS file is `cuobjdump -sass` of an object built from the same source with the same compiler and flags
as the binary racecheck ran (the offsets are the kernel's). For every reported pair of accesses it prints the
hazard count summed over the log, the kernel with its template arguments, and each access with its instruction:
a bulk copy (UBLKCP) or cp.async (LDGSTS) writing a stage against a consumer's shared load (LDS) is the stage
protocol's order through mbarriers, which racecheck does not follow (bench/probes/racecheck_stage_protocol.cu);
an ordinary shared store (STS) among them would need a look.
"""
import collections
import re
import sys

KERNELS = ("decode_kernel_rows_by_map", "grouped_gemm_sm90_kernel", "decode_kernel")


def read_sass(paths):
    """{mangled function name: {offset: instruction}}"""
    functions, current = {}, None
    for path in paths:
        for line in open(path):
            m = re.search(r"Function : (\S+)", line)
            if m:
                current = m.group(1)
                functions[current] = {}
                continue
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m and current:
                functions[current][int(m.group(1), 16)] = m.group(2).strip()
    return functions


def kernel_of(name):
    return next((k for k in KERNELS if k in name), None)


def key_demangled(name):
    """(kernel, template arguments) of racecheck's demangled name."""
    kernel = kernel_of(name)
    args = name.split(kernel + "<", 1)[1]
    return kernel, tuple(a or b for a, b in re.findall(r"\)(\d+)|WeightCode\)(\d)", args))


def key_mangled(name):
    kernel = kernel_of(name)
    if not kernel:
        return None
    return kernel, tuple(re.findall(r"L(?:NS\d_10WeightCodeE|NS\d_4sm9010ParkedFormE|b|i)(\d+)E", name.split(kernel, 1)[1]))


def opcode(instruction):
    return next((w for w in instruction.split() if not w.startswith("@")), "?")


def main():
    log, sass = open(sys.argv[1]).read().splitlines(), read_sass(sys.argv[2:])
    by_key = {}
    for name in sass:
        key = key_mangled(name)
        if key:
            by_key.setdefault(key, name)

    def instruction(name, offset):
        function = by_key.get(key_demangled(name))
        return opcode(sass[function].get(offset, "?")) if function else "(no such kernel in the SASS)"

    pairs, first = collections.Counter(), None
    for line in log:
        m = re.search(r"Race reported between (Write|Read) access at (.*)\+0x([0-9a-f]+)", line)
        if m:
            first = m.group(1), m.group(2), int(m.group(3), 16)
            continue
        m = re.search(r"and (Write|Read) access at (.*)\+0x([0-9a-f]+) \[(\d+) hazards\]", line)
        if m and first and kernel_of(first[1]) and kernel_of(m.group(2)):
            kernel, args = key_demangled(first[1])
            pairs[(kernel + str(args), first[0], instruction(first[1], first[2]), m.group(1),
                   instruction(m.group(2), int(m.group(3), 16)))] += int(m.group(4))
    for (kernel, a1, i1, a2, i2), n in sorted(pairs.items(), key=lambda kv: -kv[1]):
        print(f"{n:>9}  {kernel}: {a1} {i1} / {a2} {i2}")


if __name__ == "__main__":
    main()
