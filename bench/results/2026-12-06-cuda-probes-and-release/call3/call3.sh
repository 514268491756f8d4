#!/usr/bin/env bash
# Call 3 (session 46) at $1 plus probe.patch (last session's diagnostic switches, STEADYMOE_PROBE: 1 no copies,
# 2 no MMAs or folds, 3 no folds, 5 every tile reads expert 0's weights, and 7 no copies and no folds), each with
# the shared expert after the routed experts (STEADYMOE_SHARED_FORK=after), so that the routed GEMMs have the
# GPU to themselves: deepseek-v3 fp8 at 16384 tokens, nvidia-smi sampling the SM clock every 20 ms.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
patch -s -p1 < bench/tmp-call/s49/probe.patch || { echo 'probe.patch does not apply'; exit 1; }
source bench/device_tests.sh
build_gpu steadymoe_cli > $OUT/tests.txt 2>&1 || { cat $OUT/tests.txt; exit 1; }
cat $OUT/tests.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 20 > $OUT/t/smi.csv 2>&1 &
smi=$!
source bench/bench_runs.sh
BENCH_BUDGET_S=190
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
for p in 0 7 1 3 0b 2 5; do
  bench_run p$p "STEADYMOE_SHARED_FORK=after STEADYMOE_PROBE=${p%b}" "${v3[@]}"
done
kill $smi
compare_named p0 p7 p1 p3 p0b p2 p5 > /dev/null
cat $OUT/stages.md
python3 - $OUT/t/smi.csv <<'PY'
import sys
v = []
for line in open(sys.argv[1]):
    f = [x.strip().split()[0] for x in line.split(",")[1:3]] if line.count(",") >= 2 else None
    try: v.append((float(f[0]), float(f[1])))
    except Exception: pass
busy = sorted(c for c, w in v if w > 400)
print(f"{len(v)} clock samples, {len(busy)} above 400 W: SM MHz min {busy[0] if busy else 0:.0f}, median {busy[len(busy)//2] if busy else 0:.0f}, max {busy[-1] if busy else 0:.0f}")
PY
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
