#!/usr/bin/env bash
# Call 1 (commit in $1; the tree without bench/tmp-call/s45/fp4-weight-pairs.patch): weight pairs for block-exact
# FP4 weights meeting e4m3 rows, first run on a GPU; weight pairs for parked SwiGLU outputs (bf16 gate/ups:
# bench/tmp-call/s45/swiglu-weight-pairs.patch, on top); and the two CTest variants never run as configured.
# Applies both patches, builds; the block-exact tests with STEADYMOE_WEIGHT_PAIRS=1 first, then the SwiGLU test
# (weight pairs at k 2048 by default), each under a hang guard; the SwiGLU test with =1 and =0; the WeightPairs
# variant's filter; the layers with =1 (parked SwiGLU outputs in weight pairs); the layers with weight pairs and parked SwiGLU off (WeightPairs.Layers); clusters
# of four on the weight-pairs tests; the tensor-core suite with =1; the whole grouped-GEMM
# suite; memcheck on the block-exact pair and SwiGLU tests with =1; then deepseek-v4-flash fp4 block-exact at
# 16384 tokens with =1 against the default and qwen3-30b-a3b bf16 at 16384 by default against =0, alternating
# (deepseek-v3 bf16 once each way),
# and the profiler's DRAM bytes of deepseek-v4-flash's routed launches both ways.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1+fp4-weight-pairs+swiglu-weight-pairs
start=$SECONDS
mkdir -p $OUT/t
rm -rf build-gpu build-base
patch -p1 < bench/tmp-call/s45/fp4-weight-pairs.patch || exit 1
patch -p1 < bench/tmp-call/s45/swiglu-weight-pairs.patch || exit 1
source bench/device_tests.sh
W=STEADYMOE_WEIGHT_PAIRS=1
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
env $W timeout 90 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*BlockExact*' > $OUT/t/first.log 2>&1
rc=$?; echo "block-exact tests with weight pairs: rc=$rc"; grep -E "OK \]|FAILED|Failure|Expected|Which is" $OUT/t/first.log | head -20
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
timeout 60 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*PersistentSwiGlus*' > $OUT/t/swiglu.log 2>&1
rc=$?; echo "SwiGLU test by default: rc=$rc"; grep -E "OK \]|FAILED|Failure|Expected|Which is" $OUT/t/swiglu.log | head -20
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_grouped_gemm "$W" '*PersistentSwiGlus*:*Bf16Epilogues*:*ClusteredCtas*'
run_test test_cuda_grouped_gemm "STEADYMOE_QUAD_CTAS=1" '*PersistentSwiGlus*:*Bf16Epilogues*'
run_test test_cuda_grouped_gemm "STEADYMOE_WEIGHT_PAIRS=0" '*PersistentSwiGlus*'
run_test test_cuda_grouped_gemm "$W STEADYMOE_PARKED_SWIGLU=0" '*EveryTiledSchedule*:*Bf16Epilogues*:*ClusteredCtas*:*WeightPairsTake*:*PersistentScatters*:*BlockExact*'
run_test test_cuda_layer "$W STEADYMOE_PARKED_SWIGLU=0"
run_test test_cuda_layer "$W"
run_test test_cuda_grouped_gemm "STEADYMOE_QUAD_CTAS=1 STEADYMOE_PARKED_SWIGLU=0" '*Clustered*:*WeightPairsTake*:*BlockExactFp4WeightPairs*'
run_test test_cuda_tensor_core "$W"
run_test test_cuda_grouped_gemm
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
env $W timeout 120 $san --tool memcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*BlockExactFp4WeightPairs*:*PersistentSwiGlus*' > $OUT/t/memcheck.log 2>&1
echo "memcheck with weight pairs: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck.log | tail -1)"
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=440
X=STEADYMOE_FP4_BLOCK_EXACT=1
v4=(--workload deepseek-v4-flash --format fp4 --tokens 16384)
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
O=STEADYMOE_WEIGHT_PAIRS=0
bench_run v4x $X "${v4[@]}"; bench_run v4xw "$X $W" "${v4[@]}"
bench_run qoff $O "${q[@]}"; bench_run q - "${q[@]}"
bench_run v3boff $O --workload deepseek-v3 --format bf16 --tokens 16384; bench_run v3b - --workload deepseek-v3 --format bf16 --tokens 16384
bench_run v4xw2 "$X $W" "${v4[@]}"; bench_run v4x2 $X "${v4[@]}"
bench_run q2 - "${q[@]}"; bench_run qoff2 $O "${q[@]}"
compare_named v4x v4xw v4xw2 v4x2 qoff q q2 qoff2 v3boff v3b
ncu=/usr/local/cuda/bin/ncu
for knob in "$X" "$X $W"; do
  (( SECONDS - start > 500 )) && { echo "($knob profile skipped)" >> $OUT/counters.txt; continue; }
  tag=$( [[ $knob == *PAIRS* ]] && echo pairs || echo default )
  env $knob timeout 45 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 2 \
    --metrics dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,launch__grid_size,launch__cluster_dim_x \
    --csv --page details ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 16384 --repeat 1 \
    > $OUT/t/ncu-$tag.csv 2> $OUT/t/ncu-$tag.log
  echo "== $knob (rc=$? at $((SECONDS-start)) s)" >> $OUT/counters.txt
  python3 bench/ncu_metrics.py $OUT/t/ncu-$tag.csv >> $OUT/counters.txt 2>&1
done
cat $OUT/counters.txt
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
