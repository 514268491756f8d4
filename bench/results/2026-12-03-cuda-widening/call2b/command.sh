#!/usr/bin/env bash
# Session call 2b, on call 2's machine (its builds still there): the diagnostic CLI (75f2beb + trace.patch) with the
# trace taken from the first decode launch (call 2 asked from the 31st, which a graph-replayed bench never reaches).
ls /tmp/trace/b/steadymoe && for a in "1 STEADYMOE_DECODE_TRACE=0" "8 STEADYMOE_DECODE_TRACE=0" "1 STEADYMOE_DECODE_TRACE=0 STEADYMOE_DIAG_KSPLIT=2"; do set -- $a; tok=$1; shift; echo "=== tokens $tok $*"; env "$@" timeout 100 /tmp/trace/b/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens $tok 2>&1 | grep "trace\|^$tok "; done 2>&1 | tee $OUT/trace.txt
