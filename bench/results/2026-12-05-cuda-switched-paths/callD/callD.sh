#!/usr/bin/env bash
# Call D (s36; commit in $1): deepseek-v3 fp8 at 16384 tokens on this build against the build before the
# persistent-item lookup change (bench/tmp-call/s36/lookup.patch taken off: build-base), alternating.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
build_gpu steadymoe_cli || exit 1
build_base bench/tmp-call/s36/lookup.patch steadymoe_cli || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=400
v=(--workload deepseek-v3 --format fp8 --tokens 16384)
BENCH_CLI=./build-base/steadymoe bench_run base - "${v[@]}"; bench_run now - "${v[@]}"
bench_run now2 - "${v[@]}"; BENCH_CLI=./build-base/steadymoe bench_run base2 - "${v[@]}"
compare_named base now now2 base2
cd $OUT && tar czf t.tgz t && rm -rf t
