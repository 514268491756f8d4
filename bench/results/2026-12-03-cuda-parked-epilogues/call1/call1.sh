#!/usr/bin/env bash
# Session call 1: at $1 (persistent launches park their epilogues for three epilogue warps by default;
# STEADYMOE_PARKED_EPILOGUES=0 runs them from registers; STEADYMOE_PREFILL_CTAS=half puts bf16 and e4m3 prefill
# launches on 64-row CTAs two to an SM). Every GPU test binary once, the grouped-GEMM, tensor-core and layer
# tests under both knobs; deepseek-v3 fp8 and qwen3 bf16 at 16384 tokens under the three forms; qwen3 with
# every launch persistent (its down GEMM too). The fold's scales are read while the MMAs run (69f4bba), and the next item's tile an item ahead.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
  echo "=== $t" >> $OUT/t/gpu-tests.log
  timeout 60 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; echo "$t: rc=$?"
done
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -20
echo "first tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=330
bench_run q - --workload qwen3-30b-a3b --format bf16 --tokens 4096,16384
bench_run q-registers STEADYMOE_PARKED_EPILOGUES=0 --workload qwen3-30b-a3b --format bf16 --tokens 4096,16384
bench_run q-half STEADYMOE_PREFILL_CTAS=half --workload qwen3-30b-a3b --format bf16 --tokens 16384
bench_run q-persistent STEADYMOE_TILED_SCHEDULE=persistent --workload qwen3-30b-a3b --format bf16 --tokens 4096,16384
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 16384
bench_run v3-registers STEADYMOE_PARKED_EPILOGUES=0 --workload deepseek-v3 --format fp8 --tokens 16384
bench_run v3-half STEADYMOE_PREFILL_CTAS=half --workload deepseek-v3 --format fp8 --tokens 16384
{
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  (( SECONDS - start >= 520 )) && { echo "(the rest skipped: time)"; break; }
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 60 $t >> $OUT/t/gpu-tests.log 2>&1; echo "$(basename $t): rc=$?"
done
for knob in STEADYMOE_PARKED_EPILOGUES=0 STEADYMOE_PREFILL_CTAS=half; do
  for t in test_cuda_grouped_gemm test_cuda_layer; do
    (( SECONDS - start >= 560 )) && { echo "(the rest skipped: time)"; break; }
    echo "=== $t ($knob)" >> $OUT/t/gpu-tests.log
    env $knob timeout 40 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; echo "$t with $knob: rc=$?"
  done
done
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} >> $OUT/tests.txt 2>&1
cd $OUT && tar czf t.tgz t && rm -rf t
