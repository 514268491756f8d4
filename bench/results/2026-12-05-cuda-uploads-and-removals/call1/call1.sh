#!/usr/bin/env bash
# Call 1 (s40; commit in $1): the grouped GEMM suite at HEAD (launch counts under the parked-SwiGLU default);
# racecheck on the default parked scatter and on the default parked SwiGLU outputs (bf16 x bf16); expert
# uploads through page-locked staging (test_cuda_uploads; the layer suites with every upload through a ring of
# 4 KB chunks: PinnedUploads ctest entries); the RegisterSwiGlu ctest entries; the other GPU suites. The
# in-stage and fused-e4m3 paths are removed (the remaining kernels as before).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
source bench/device_tests.sh
T="test_cuda_uploads test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core test_cuda_gathers test_cuda_routing test_cuda_permutation test_cuda_combine test_cuda_gemm test_cuda_codecs"
{
build_gpu steadymoe_cli $T || exit 1
run_test test_cuda_uploads
run_test test_cuda_grouped_gemm
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for f in PersistentSwiGlus PersistentScatters; do
  timeout 110 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter="*$f*" \
    > $OUT/t/racecheck-$f.log 2>&1; echo "racecheck $f: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck-$f.log | tail -1) at $((SECONDS-start)) s"
done
for t in test_cuda_layer test_cuda_tensor_core test_cuda_gathers test_cuda_routing test_cuda_permutation test_cuda_combine test_cuda_gemm test_cuda_codecs; do run_test $t; done
echo "suites done at $((SECONDS-start)) s"
(cd build-gpu && timeout $((570 - (SECONDS - start))) ctest -j3 -R 'RegisterSwiGlu|PinnedUploads\.' --output-on-failure > $OUT/t/ctest-entries.log 2>&1
 echo "ctest RegisterSwiGlu.*, PinnedUploads.*: rc=$? $(grep 'tests passed' $OUT/t/ctest-entries.log)")
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -40
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
