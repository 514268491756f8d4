#!/usr/bin/env bash
# Session call 1: at $1 (the decode kernel now takes BF16 and FP8 x e4m3 weights as the MMAs' first
# operand, 64 features a CTA). Every GPU test with each variant (STEADYMOE_DECODE_KERNEL=tiled among them),
# compute-sanitizer on the few-row kernels, then decode batches with the decode kernel and with the tiled
# kernel's 64-row CTAs: qwen3 bf16, deepseek-v3 fp8, and deepseek-v4 fp4 (its kernel only refactored).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
san=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck initcheck; do
  timeout 90 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
    --gtest_filter='CudaGroupedGemm.FewRowCtas*:CudaGroupedGemm.Fp4Decode*' > $OUT/t/sanitize-$tool.log 2>&1
  echo "compute-sanitizer $tool (few-row kernels): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/t/sanitize-$tool.log | tr '\n' ' ')" >> $OUT/tests.txt
done
echo "sanitizer done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 470 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 90 $b bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
q=(--workload qwen3-30b-a3b --format bf16 --tokens 1,8,128)
v3=(--workload deepseek-v3 --format fp8 --tokens 1,8,128)
run q X=1 -- "${q[@]}"
run q-tiled STEADYMOE_DECODE_KERNEL=tiled -- "${q[@]}"
run v3 X=1 -- "${v3[@]}"
run v3-tiled STEADYMOE_DECODE_KERNEL=tiled -- "${v3[@]}"
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8
cd $OUT && tar czf t.tgz t && rm -rf t
