#!/usr/bin/env bash
# Call 5 (s32): where the shared expert forks, again on main (61ce692, the source of 97b17e5): calls 1-2 saw the
# side stream's work slow the routing kernel beside it. deepseek-v4-flash at 1 and 8 tokens with the fork after
# the router's GEMM (the default), after the routing (STEADYMOE_SHARED_FORK=routing) and before the router's GEMM
# (=start); deepseek-v3 default against =routing.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=400
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-routing STEADYMOE_SHARED_FORK=routing "${v4[@]}"
bench_run v3 - "${v3[@]}"; bench_run v3-routing STEADYMOE_SHARED_FORK=routing "${v3[@]}"
bench_run v4-start STEADYMOE_SHARED_FORK=start "${v4[@]}"
compare_named v4 v4-routing v4-start v3 v3-routing
for set in "v4 v4-routing v4-start" "v3 v3-routing"; do
  runs=(); for n in $set; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) && python3 bench/compare_traces.py "${runs[@]}" >> $OUT/traces.md 2>&1
done
cd $OUT && tar czf t.tgz t && rm -rf t
