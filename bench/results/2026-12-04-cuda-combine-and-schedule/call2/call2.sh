#!/usr/bin/env bash
# Call 2: the combine's loads all issued per chunk, and bf16 SwiGLU outputs before the down GEMM's quantisation
# (STEADYMOE_SWIGLU_OUTPUTS=f32 to compare), at $1 against main (change2.patch taken back).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_combine test_cuda_layer test_cuda_tensor_core test_cli || exit 1
run_test test_cuda_combine
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_layer STEADYMOE_SWIGLU_OUTPUTS=f32
run_test test_cli
memcheck test_cuda_combine
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
build_base bench/tmp-call/s29/change2.patch steadymoe_cli
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=470
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,4096,16384)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,4096,16384)
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,16384)
bench_run q3-new - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-main - "${q3[@]}"
bench_run v3-new - "${v3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run v3-main - "${v3[@]}"
bench_run v3-f32 STEADYMOE_SWIGLU_OUTPUTS=f32 "${v3[@]}"
bench_run v4-new - "${v4[@]}"
runs=(); for n in q3-main q3-new v3-main v3-new v3-f32 v4-new; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
cat $OUT/compare.md
python3 - "$OUT/t" <<'PY' | tee $OUT/stages.md
import json, sys, os
print("| run | tokens | router | routed (gate/up + down) | shared | combine | untimed layer | experts |")
print("|---|---|---|---|---|---|---|---|")
for n in ["q3-main", "q3-new", "v3-main", "v3-new", "v3-f32", "v4-new"]:
    f = os.path.join(sys.argv[1], n + ".json")
    if not os.path.exists(f): continue
    for p in json.load(open(f))["points"]:
        print(f"| {n} | {p['tokens']} | {p['router_us']:.1f} | {p['routed_us']:.1f} ({p['gate_up_us']:.1f} + {p['down_us']:.1f}) | "
              f"{p['shared_us']:.1f} | {p['combine_us']:.1f} | {p['layer_untimed_us']:.1f} | {p['experts_untimed_us']:.1f} |")
PY
cd $OUT && tar czf t.tgz t && rm -rf t
