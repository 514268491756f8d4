#!/usr/bin/env bash
# Call 4 (s32): compute-sanitizer over main's device code (61ce692, the source of 97b17e5) at small sizes: memcheck,
# initcheck, then racecheck on the tensor-core layer test (router, permutation, gathers, quantisers, decode and
# tiled GEMMs, combine; graphs for memcheck), the gathers and quantisers, the permutation, the routing, the
# combine and the few-row / FP4 / indexed-row / epilogue GEMM tests. Runs are skipped once 540 s have passed.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
build_gpu test_cuda_tensor_core test_cuda_permutation test_cuda_combine test_cuda_gathers test_cuda_grouped_gemm \
  test_cuda_routing || exit 1
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
gemms='CudaGroupedGemm.FewRowCtas*:CudaGroupedGemm.DecodeKernel*:CudaGroupedGemm.Fp4Decode*:CudaGroupedGemm.Fp4MeetingE4m3*:CudaGroupedGemm.IndexedRows*:CudaGroupedGemm.Bf16Epilogues*'
sweep() {
  local tool=$1 t=$2 filter=$3 log=$OUT/t/san-$1-$2.log
  if (( SECONDS - start >= 540 )); then echo "$tool $t: skipped (the call's time is nearly spent)"; return; fi
  local t0=$SECONDS
  timeout 150 $san --tool $tool --error-exitcode 3 build-gpu/tests/$t --gtest_filter="$filter" > $log 2>&1
  echo "$tool $t ($filter): rc=$? in $((SECONDS - t0)) s; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED' $log | tr '\n' ' ')"
}
{
for tool in memcheck initcheck; do
  sweep $tool test_cuda_tensor_core '*MatchesTheCpuBackendWithinRounding*:*GraphReplays*'
  sweep $tool test_cuda_gathers '*'
  sweep $tool test_cuda_permutation 'CudaPermutation.*'
  sweep $tool test_cuda_routing '*'
  sweep $tool test_cuda_combine '*'
  sweep $tool test_cuda_grouped_gemm "$gemms"
done
sweep racecheck test_cuda_tensor_core '*MatchesTheCpuBackendWithinRounding*'
sweep racecheck test_cuda_gathers '*'
sweep racecheck test_cuda_permutation 'CudaPermutation.*'
sweep racecheck test_cuda_routing '*'
sweep racecheck test_cuda_combine '*'
sweep racecheck test_cuda_grouped_gemm "$gemms"
echo "done at $((SECONDS - start)) s"
} > $OUT/sanitize.txt 2>&1
cat $OUT/sanitize.txt
cd $OUT && tar czf t.tgz t && rm -rf t
