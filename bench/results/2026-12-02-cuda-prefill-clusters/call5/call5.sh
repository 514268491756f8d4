#!/usr/bin/env bash
# Session call 5: sanitizers over the paired-CTA schedule test, and hardware counters of the prefill GEMMs
# as they now run (tensor pipe, shared-memory wavefronts of the MMAs, stall reasons) for the next steps.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden
start=$SECONDS
nv=/usr/local/cuda/bin
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 --target steadymoe test_cuda_grouped_gemm > $OUT/build.log 2>&1 || { tail -40 $OUT/build.log; exit 1; }
echo "built at $((SECONDS-start)) s"
for tool in racecheck initcheck; do
  timeout 60 $nv/compute-sanitizer --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='NBlocks/*' > $OUT/san-$tool.log 2>&1
  echo "compute-sanitizer $tool (paired schedule test): rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' $OUT/san-$tool.log | tr '\n' ' ')"
done
b=./build-gpu/steadymoe
m=sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_gmma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_gmma.sum,gpu__time_duration.sum
for spec in qwen3-30b-a3b:bf16:3 deepseek-v3:fp8:5; do
  IFS=: read wl fmt n <<< "$spec"
  timeout 100 $nv/ncu --clock-control none --csv --page details --kernel-name regex:grouped_gemm_sm90 --launch-count $n \
    --metrics "$m" $b bench --backend cuda --workload $wl --format $fmt --tokens 16384 --repeat 1 > $OUT/pipes-$wl.csv 2> /tmp/pipes-$wl.err
  echo "$wl pipes rc=$? at $((SECONDS-start)) s"
  timeout 100 $nv/ncu --clock-control none --csv --page details --kernel-name regex:grouped_gemm_sm90 --launch-count $n \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" $b bench --backend cuda --workload $wl --format $fmt \
    --tokens 16384 --repeat 1 > $OUT/stalls-$wl.csv 2> /tmp/stalls-$wl.err
  echo "$wl stalls rc=$? at $((SECONDS-start)) s"
done
cd $OUT && tar czf raw.tgz *.csv *.log && rm -f *.csv *.log
