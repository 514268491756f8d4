#!/usr/bin/env bash
# Call 4 (commit in $1; no patch): the grouped-GEMM suite on the commit that lands (block-exact FP4 weights in
# weight pairs only where asked again), by default and with STEADYMOE_WEIGHT_PAIRS=1 on the block-exact and
# SwiGLU tests; then the hardware counters (bench/run_gpu.sh's ncu mode: speed of light, memory workload with
# shared memory, warp stalls) of deepseek-v3 fp8's first six grouped-GEMM launches at 16384 tokens (the FP8
# gate/up among them: half folds, which read each stage's rows from shared memory twice, measured 5-6% slower
# in call 2, so is shared memory near its limit?), and of every one-token kernel of deepseek-v4-flash fp4 (its
# decode floor/routed is the furthest from its target).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm || exit 1
timeout 120 build-gpu/tests/test_cuda_grouped_gemm > $OUT/t/first.log 2>&1
rc=$?; echo "grouped-GEMM suite: rc=$rc $(grep -c '^\[       OK' $OUT/t/first.log) OK"; grep -E "FAILED|Failure|Expected|Which is" $OUT/t/first.log | head -20
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_grouped_gemm "STEADYMOE_WEIGHT_PAIRS=1" '*BlockExact*:*PersistentSwiGlus*'
run_test test_cuda_grouped_gemm "STEADYMOE_WEIGHT_PAIRS=1 STEADYMOE_FP4_BLOCK_EXACT=1" '*BlockExact*'
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
# (bench/run_gpu.sh's ncu mode, called here directly: that script builds every target first)
profile() {  # TAG KERNEL_REGEX COUNT TIMEOUT WORKLOAD FORMAT TOKENS
  timeout $4 /usr/local/cuda/bin/ncu --clock-control none --csv --page details --kernel-name "regex:$2" --launch-count $3 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" ./build-gpu/steadymoe bench --backend cuda \
    --workload $5 --format $6 --tokens $7 --repeat 1 > $OUT/t/ncu-$1.csv 2> $OUT/t/ncu-$1.err
  echo "== $1 (rc=$? at $((SECONDS-start)) s)" >> $OUT/ncu.txt
  python3 bench/ncu_table.py $OUT/t/ncu-$1.csv >> $OUT/ncu.txt 2>&1
}
profile v3-16k grouped_gemm_sm90 6 200 deepseek-v3 fp8 16384
(( SECONDS - start < 380 )) && profile v4-one . 40 $((560 - (SECONDS - start))) deepseek-v4-flash fp4 1
cat $OUT/ncu.txt
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
