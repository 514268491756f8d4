#!/usr/bin/env bash
# Call A (s36; commit in $1): the chunked MMAs' tests (STEADYMOE_FP4_CHUNKED_MMAS=1: the FP4 x e4m3 and
# indexed-rows grouped-GEMM tests, the tensor-core suite's FP4 x FP8 layers) and the default grouped-GEMM and
# layer tests (main's persistent-item lookup of the last session runs in every persistent launch); then
# deepseek-v4-flash fp4 at 4096 and 16384 tokens, default and chunked, alternating; then the profiler's issue,
# tensor-pipe, FMA-pipe and stall figures on FP4 launches each way, as the call's time allows; memcheck last.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
C="STEADYMOE_FP4_CHUNKED_MMAS=1"
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm "$C" '*Fp4MeetingE4m3*:*IndexedRows*'
run_test test_cuda_tensor_core "$C" '*/fp4_fp8'
run_test test_cuda_grouped_gemm
run_test test_cuda_layer
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|CTAs per SM|chunks|64 tokens wide" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=330
v=(--workload deepseek-v4-flash --format fp4 --tokens 4096,16384)
bench_run wide - "${v[@]}"; bench_run chunked "$C" "${v[@]}"
bench_run chunked2 "$C" "${v[@]}"; bench_run wide2 - "${v[@]}"
compare_named wide chunked chunked2 wide2
ncu=/usr/local/cuda/bin/ncu
m=sm__inst_issued.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,gpu__time_duration.sum
for run in "wide STEADYMOE_UNSET=1" "chunked $C"; do
  set -- $run
  (( SECONDS - start < 430 )) || break
  env $2 timeout 75 $ncu --clock-control none --kernel-name regex:decode_kernel --launch-skip 4 --launch-count 2 \
    --metrics "$m" --csv ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 16384 \
    --repeat 1 > $OUT/t/ncu-$1.csv 2>&1
  echo "== $1 (rc=$?)"; grep -E "issued|tensor|fma|long_scoreboard|duration" $OUT/t/ncu-$1.csv | cut -d, -f5,12- | head -10
done
(( SECONDS - start < 500 )) && STEADYMOE_FP4_CHUNKED_MMAS=1 memcheck test_cuda_grouped_gemm '*Fp4MeetingE4m3*'
cd $OUT && tar czf t.tgz t && rm -rf t
