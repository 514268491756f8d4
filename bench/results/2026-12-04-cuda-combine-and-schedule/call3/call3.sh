#!/usr/bin/env bash
# Call 3 at $1: items in groups of row tiles (STEADYMOE_ITEM_GROUP) on deepseek-v3 fp8 at 16384 tokens and qwen3
# bf16 at 4096 and 16384; deepseek-v3's down GEMM parked (its epilogue is cheap now); qwen3's down persistent.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer || exit 1
run_test test_cuda_grouped_gemm STEADYMOE_ITEM_GROUP=4
run_test test_cuda_layer STEADYMOE_ITEM_GROUP=3
run_test test_cuda_layer "STEADYMOE_ITEM_GROUP=4 STEADYMOE_PARKED_EPILOGUES=1"
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=420
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 4096,16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 16384)
for G in 1 4 2 8; do bench_run q3-g$G STEADYMOE_ITEM_GROUP=$G "${q3[@]}"; done
bench_run q3-g1-pers STEADYMOE_TILED_SCHEDULE=persistent "${q3[@]}"
bench_run q3-g4-pers "STEADYMOE_ITEM_GROUP=4 STEADYMOE_TILED_SCHEDULE=persistent" "${q3[@]}"
bench_run v3-g1 - "${v3[@]}"
bench_run v3-g4 STEADYMOE_ITEM_GROUP=4 "${v3[@]}"
bench_run v3-g1-park STEADYMOE_PARKED_EPILOGUES=1 "${v3[@]}"
bench_run v3-g2 STEADYMOE_ITEM_GROUP=2 "${v3[@]}"
bench_run v3-g8 STEADYMOE_ITEM_GROUP=8 "${v3[@]}"
names=(q3-g1 q3-g4 q3-g2 q3-g8 q3-g1-pers q3-g4-pers v3-g1 v3-g4 v3-g1-park v3-g2 v3-g8)
runs=(); for n in "${names[@]}"; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 - "$OUT/t" "${names[@]}" <<'PY' | tee $OUT/stages.md
import json, sys, os
print("| run | tokens | routed (gate/up + down) | shared | combine | untimed layer | experts | digest |")
print("|---|---|---|---|---|---|---|---|")
for n in sys.argv[2:]:
    f = os.path.join(sys.argv[1], n + ".json")
    if not os.path.exists(f): continue
    for p in json.load(open(f))["points"]:
        print(f"| {n} | {p['tokens']} | {p['routed_us']:.1f} ({p['gate_up_us']:.1f} + {p['down_us']:.1f}) | "
              f"{p['shared_us']:.1f} | {p['combine_us']:.1f} | {p['layer_untimed_us']:.1f} | {p['experts_untimed_us']:.1f} | {p.get('output_fnv1a','')} |")
PY
grep "done at\|skipped" $OUT/bench.txt
cd $OUT && tar czf t.tgz t && rm -rf t
