#!/usr/bin/env bash
# Session call 2: at $1 (the decode kernel's consumers copy the tokens' 128-block scales of their CTA's whole k
# range while the producer's first stages are in flight; shares counted in 128-byte units). Every GPU test
# binary once (each binary's own exit status: call 1's script echoed basename's); the grouped-GEMM, tensor-core
# and layer tests with STEADYMOE_HELD_TOKEN_SCALES=0; memcheck, racecheck and initcheck on the FP4 x e4m3 and
# decode-kernel tests; deepseek-v4-flash decode and 16384 tokens and deepseek-v3 decode, held against per
# stage; then the peers (dense GEMM rates, torch._grouped_mm) on the held runs' records.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
  case $t in *.cmake) continue;; esac
  echo "=== $(basename $t)" >> $OUT/t/gpu-tests.log
  timeout 90 $t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$(basename $t): rc=$rc"
done
for knob in STEADYMOE_HELD_TOKEN_SCALES=0; do
  for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
    echo "=== $t ($knob)" >> $OUT/t/gpu-tests.log
    env $knob timeout 60 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$t with $knob: rc=$rc"
  done
done
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck initcheck; do
  timeout 150 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
    --gtest_filter='*Fp4MeetingE4m3*:*DecodeKernelPartial*' > $OUT/t/$tool.log 2>&1
  rc=$?; echo "$tool of the FP4 x e4m3 and decode-kernel tests: rc=$rc $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/t/$tool.log | tail -1)"
done
grep -h "FP4 x e4m3 CTAs per SM\|relative error" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
BENCH_BUDGET_S=470
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-per-stage STEADYMOE_HELD_TOKEN_SCALES=0 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_run v4-prefill - --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_run v4-prefill-per-stage STEADYMOE_HELD_TOKEN_SCALES=0 --workload deepseek-v4-flash --format fp4 --tokens 16384
bench_run v3 - --workload deepseek-v3 --format fp8 --tokens 1,8,128
bench_run v3-per-stage STEADYMOE_HELD_TOKEN_SCALES=0 --workload deepseek-v3 --format fp8 --tokens 1,8,128
if (( SECONDS - start < 520 )); then
  timeout $((590 - (SECONDS - start))) python3 bench/gpu_peers.py $OUT/t/peers.json $OUT/t/v4.json $OUT/t/v4-prefill.json $OUT/t/v3.json > $OUT/peers.md 2>&1
  echo "(peers rc=$? at $((SECONDS - start)) s)" >> $OUT/bench.txt
fi
cd $OUT && tar czf t.tgz t && rm -rf t
