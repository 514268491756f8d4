#!/usr/bin/env bash
# Call 4 at $1 (main): every GPU test; qwen3 bf16 (1 to 16384 tokens, two alternating pairs of runs) against
# 3f6289c (the session's start: change4.patch taken back, the combine's loads and the down GEMM's schedule).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_codecs test_cuda_combine test_cuda_gemm test_cuda_grouped_gemm test_cuda_layer \
  test_cuda_permutation test_cuda_routing test_cuda_tensor_core test_cuda_ep test_cli || exit 1
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do [[ -x $t ]] && run_test $(basename $t); done
grep -E "^\[  FAILED|Failure|Expected|Which is" $OUT/t/gpu-tests.log | head -20
build_base bench/tmp-call/s29/change4.patch steadymoe_cli
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=330
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,4096,16384)
bench_run q3-new - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-start - "${q3[@]}"
bench_run q3-new2 - "${q3[@]}"; BENCH_CLI=./build-base/steadymoe bench_run q3-start2 - "${q3[@]}"
names=(q3-start q3-new q3-start2 q3-new2)
runs=(); for n in "${names[@]}"; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 - "$OUT/t" "${names[@]}" <<'PY' | tee $OUT/stages.md
import json, sys, os
print("| run | tokens | router | routed (gate/up + down) | shared | combine | untimed layer | experts | digest |")
print("|---|---|---|---|---|---|---|---|---|")
for n in sys.argv[2:]:
    f = os.path.join(sys.argv[1], n + ".json")
    if not os.path.exists(f): continue
    for p in json.load(open(f))["points"]:
        print(f"| {n} | {p['tokens']} | {p['router_us']:.1f} | {p['routed_us']:.1f} ({p['gate_up_us']:.1f} + {p['down_us']:.1f}) | "
              f"{p['shared_us']:.1f} | {p['combine_us']:.1f} | {p['layer_untimed_us']:.1f} | {p['experts_untimed_us']:.1f} | {p.get('output_fnv1a','')} |")
PY
grep "done at\|skipped" $OUT/bench.txt
cd $OUT && tar czf t.tgz t && rm -rf t
