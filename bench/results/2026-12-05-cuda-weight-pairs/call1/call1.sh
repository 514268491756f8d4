#!/usr/bin/env bash
# For the next session's first GPU call (commit in $1, with bench/tmp-call/s43/weight-pairs.patch applied and
# committed, or applied here by this script when $2 = apply): weight pairs (STEADYMOE_WEIGHT_PAIRS=1: clusters of
# two on two row tiles of an item, sharing the weights' copies where one expert's; not yet run on a GPU).
# The cluster test with them and by default (memcheck on it), the tensor-core suite and the layers with them;
# deepseek-v3 fp8 and qwen3 bf16 at 16384 tokens against the default (pairs sharing rows), alternating; the
# profiler's DRAM and L2 bytes of deepseek-v3's routed launches both ways. (qwen3's bf16 gate/up parks its SwiGLU
# outputs, a form without weight pairs: only its down GEMM changes.)
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
[[ ${2:-} == apply ]] && { patch -p1 < bench/tmp-call/s43/weight-pairs.patch || exit 1; }
source bench/device_tests.sh
W=STEADYMOE_WEIGHT_PAIRS=1
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer || exit 1
timeout 60 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Clustered*' > $OUT/t/first.log 2>&1
echo "cluster test by default: rc=$?"
env $W timeout 60 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Clustered*' >> $OUT/t/first.log 2>&1
rc=$?; echo "cluster test with weight pairs: rc=$rc"; grep -E "OK|FAILED|Failure|first at" $OUT/t/first.log | head
(( rc == 124 )) && { echo "hung: stopping"; exit 1; }
run_test test_cuda_grouped_gemm "$W STEADYMOE_PARKED_SWIGLU=0" '*EveryTiledSchedule*:*Bf16Epilogues*:*ClusteredCtas*:*PersistentScatters*'
run_test test_cuda_tensor_core "$W STEADYMOE_PARKED_SWIGLU=0"
run_test test_cuda_layer $W
run_test test_cuda_grouped_gemm
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
env $W timeout 120 $san --tool memcheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='*Clustered*' > $OUT/t/memcheck-pairs.log 2>&1
echo "memcheck with weight pairs: rc=$? $(grep -h 'ERROR SUMMARY' $OUT/t/memcheck-pairs.log | tail -1)"
grep -E "^\[  FAILED|Failure|Expected|Which is|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
grep -q "hung: stopping" $OUT/tests.txt && exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=380
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
q=(--workload qwen3-30b-a3b --format bf16 --tokens 16384)
bench_run v3 - "${v3[@]}"; bench_run v3w $W "${v3[@]}"
bench_run q - "${q[@]}"; bench_run qw $W "${q[@]}"
bench_run v3w2 $W "${v3[@]}"; bench_run v3-2 - "${v3[@]}"
compare_named v3 v3w v3w2 v3-2 q qw
ncu=/usr/local/cuda/bin/ncu
for knob in STEADYMOE_UNSET=1 $W; do
  (( SECONDS - start > 480 )) && { echo "($knob profile skipped)" >> $OUT/counters.txt; continue; }
  env $knob timeout 100 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 2 \
    --metrics dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x \
    --csv --page details ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 \
    > $OUT/t/ncu-${knob%%=*}.csv 2> $OUT/t/ncu-${knob%%=*}.log
  echo "== $knob (rc=$? at $((SECONDS-start)) s)" >> $OUT/counters.txt
  python3 bench/ncu_metrics.py $OUT/t/ncu-${knob%%=*}.csv >> $OUT/counters.txt 2>&1
done
cat $OUT/counters.txt
echo "call done at $((SECONDS-start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
