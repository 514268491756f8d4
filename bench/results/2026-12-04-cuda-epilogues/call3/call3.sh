#!/usr/bin/env bash
# Call 3 (session 28) at $1: persistent CTAs take an expert's items n-block by n-block over its tiles (the default)
# against tile order (STEADYMOE_ITEM_ORDER=tiles). Tests under both; deepseek-v3 fp8 and qwen3 bf16 alternating;
# DRAM and L2 bytes of deepseek-v3's routed GEMMs at 16384 tokens both ways.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_ITEM_ORDER=tiles
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_layer STEADYMOE_PARKED_EPILOGUES=1
memcheck test_cuda_grouped_gemm '*EveryTiledSchedule*'
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
v3=(--workload deepseek-v3 --format fp8 --tokens 4096,16384)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 4096,16384)
bench_run v3-tiles STEADYMOE_ITEM_ORDER=tiles "${v3[@]}"; bench_run v3-experts - "${v3[@]}" --trace
bench_run q3-experts - "${q3[@]}"; bench_run q3-tiles STEADYMOE_ITEM_ORDER=tiles "${q3[@]}"
bench_run v3-experts-again - "${v3[@]}"; bench_run v3-tiles-again STEADYMOE_ITEM_ORDER=tiles "${v3[@]}"
runs=(); for n in v3-tiles v3-experts v3-tiles-again v3-experts-again q3-tiles q3-experts; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md
[[ -f $OUT/t/v3-experts.json ]] && python3 bench/compare_traces.py "v3=$OUT/t/v3-experts.json" > $OUT/traces.md 2>&1; head -60 $OUT/traces.md
ncu=/usr/local/cuda/bin/ncu
for order in experts tiles; do
  (( SECONDS - start > 430 )) && { echo "($order profile skipped at $((SECONDS-start)) s)" >> $OUT/counters.txt; continue; }
  knob=STEADYMOE_UNSET=1; [[ $order == tiles ]] && knob=STEADYMOE_ITEM_ORDER=tiles
  env $knob timeout 100 $ncu --clock-control none --kernel-name regex:grouped_gemm_sm90 --launch-skip 3 --launch-count 2 \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct \
    --csv --page details ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --repeat 1 \
    > $OUT/t/ncu-$order.csv 2> $OUT/t/ncu-$order.log
  echo "== $order (rc=$? at $((SECONDS-start)) s)" >> $OUT/counters.txt
  python3 bench/ncu_metrics.py $OUT/t/ncu-$order.csv >> $OUT/counters.txt 2>&1
done
cat $OUT/counters.txt
cd $OUT && tar czf t.tgz t && rm -rf t
