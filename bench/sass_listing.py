"""Reading a SASS listing: `cuobjdump -sass FILE.cubin` (each function headed `Function : NAME`, branches to
addresses) or `nvdisasm -c FILE.cubin` (sections `.text.NAME`, branches to labels; bench/local_sass.sh)."""
import re

ADDRESSED = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
HEADS = (re.compile(r"Function : (\S+)"), re.compile(r"\.section\s+\.text\.([^,\s]+)"))


def functions(path):
    """(name, [(address, instruction text)], {label: address}) per function, in the listing's order."""
    name, body, labels, pending = None, [], {}, []
    for line in open(path, encoding="utf-8", errors="replace"):
        head = HEADS[0].search(line) or HEADS[1].search(line)
        if head:
            if name:
                yield name, body, labels
            name, body, labels, pending = head.group(1), [], {}, []
            continue
        label = LABEL.match(line)
        if label:
            pending.append(label.group(1))
            continue
        found = ADDRESSED.search(line)
        if found and name:
            address = int(found.group(1), 16)
            for pending_label in pending:
                labels[pending_label] = address
            pending = []
            body.append((address, found.group(2)))
    if name:
        yield name, body, labels


def short_name(name):
    """The kernel's identifier and template arguments, without the namespaces' mangling before them: the
    identifier holding _kernel (lower case and underscores from there to its template arguments' I) is the one
    whose length prefix (digits right before it) says its length."""
    found = re.search(r"_kernel[a-z_]*I", name)
    if not found:
        return name[:150]
    end = found.end() - 1
    for run in re.finditer(r"\d+", name[:end]):
        digits = run.group()
        for cut in range(len(digits)):
            if int(digits[cut:]) == end - run.end():
                return name[run.end():][:150]
    return name[:150]
