#!/usr/bin/env bash
# Call 3 (commit in $1, plus release-tall.patch beside this script; $1 built beside it): tall tiles (three
# consumer warpgroups: deepseek-v3's FP8 gate/up and down at 16384 tokens) give a block's stage back to the
# producer right after its MMAs, before the fold (which works from registers), by an elect.sync arrival with no
# branch. Call 2's samples: the tall gate/up's consumers waited for a stage's data 18% of their time, their
# producer for a released stage 35% of its. (Session 46 measured this order on 128-row tiles: level, not kept.)
# Checks the order in the machine code, runs the grouped GEMM and tensor-core suites, then deepseek-v3 fp8 at
# 16384 tokens with the shared expert after, base and patched alternating, and deepseek-v4-flash fp8 once each.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
P=bench/results/2026-12-06-cuda-route-kernels/call3/release-tall.patch
patch -s -p1 < $P || { echo 'release-tall.patch does not apply'; exit 1; }
source bench/device_tests.sh
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core || exit 1
build_base $P steadymoe_cli || exit 1
o=$(find build-gpu -name 'grouped_gemm_sm90.cu.o' | head -1)
/usr/local/cuda/bin/cuobjdump -sass "$o" > $OUT/t/sass.txt 2>&1
python3 bench/sass_release_order.py $OUT/t/sass.txt ILi3ELi1E | head -40
run_test test_cuda_grouped_gemm
run_test test_cuda_tensor_core
grep -h "FAILED\|Failure" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "rc=[1-9]" $OUT/tests.txt && { echo "a test failed: no timing"; cd $OUT && tar czf t.tgz t && rm -rf t; exit 1; }
source bench/bench_runs.sh
BENCH_BUDGET_S=520
A=STEADYMOE_SHARED_FORK=after
B=./build-base/steadymoe
v3="--workload deepseek-v3 --format fp8 --tokens 16384"
v4="--workload deepseek-v4-flash --format fp8 --tokens 16384"
BENCH_CLI=$B bench_run v3-base $A $v3
bench_run v3-early $A $v3
BENCH_CLI=$B bench_run v3-base-again $A $v3
bench_run v3-early-again $A $v3
BENCH_CLI=$B bench_run v4-base $A $v4
bench_run v4-early $A $v4
{ compare_named v3-base v3-early v3-base-again v3-early-again; compare_named v4-base v4-early; } > $OUT/compare-all.md 2>&1
grep -E "^(===|16384 )" $OUT/bench.txt | cut -c1-250
cat $OUT/compare-all.md
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
