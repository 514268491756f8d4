#!/usr/bin/env bash
# next_call.sh at its least, for about 300 s of run after the start, at $1 (4b4de1c or a later commit with the
# same kernels): no tests, one build of the CLI; deepseek-v4-flash fp4 at 4096 and 16384 tokens the three ways
# (default, STEADYMOE_PER32_WIDE_CTAS=staggered, =two), alternating, until BUDGET seconds from the start. The
# records' output digests compare the bits.
set -u
export STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
{ nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader; build_gpu steadymoe_cli || exit 1; } > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-200}
for r in 1 2; do
  bench_run v4-three-$r - --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
  bench_run v4-staggered-$r STEADYMOE_PER32_WIDE_CTAS=staggered --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
  bench_run v4-two-$r STEADYMOE_PER32_WIDE_CTAS=two --workload deepseek-v4-flash --format fp4 --tokens 4096,16384
done
bench_points
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
