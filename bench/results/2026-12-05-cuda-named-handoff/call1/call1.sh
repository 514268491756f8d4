#!/usr/bin/env bash
# Call 1 (s41; commit in $1, with named.patch: the parked hand-off through named barriers, upload layouts into reused buffers): the hand-off probe
# under racecheck (mbarriers, named barriers); the racecheck options this compute-sanitizer offers; the grouped
# GEMM suite and racecheck on its persistent parked tests (scatter, SwiGLU; F32 parked results: EveryTiledSchedule/0); the
# layer and tensor-core suites; test_cuda_uploads and ctest PinnedUploads.EpLayers (not yet run on a GPU).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
{
nvcc -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I include -o $OUT/t/probe \
  bench/probes/racecheck_parked_handoff.cu > $OUT/t/probe-build.log 2>&1; echo "probe build rc=$?"
for m in mbarrier named; do
  $OUT/t/probe $m > $OUT/t/probe-$m-plain.log 2>&1; echo "probe $m (no sanitizer): rc=$? $(tail -1 $OUT/t/probe-$m-plain.log)"
  timeout 60 $san --tool racecheck --racecheck-report all $OUT/t/probe $m > $OUT/t/probe-$m.log 2>&1
  echo "racecheck probe $m: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/probe-$m.log | tail -2 | tr '\n' ' ')"
  grep -m6 -i "hazard\|race" $OUT/t/probe-$m.log
done
$san --version | tail -2
$san --help 2>&1 | grep -i -A3 "racecheck" > $OUT/t/sanitizer-racecheck-options.txt
echo "probe done at $((SECONDS-start)) s"
} > $OUT/probe.txt 2>&1
cat $OUT/probe.txt
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_uploads test_cuda_ep test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core || exit 1
run_test test_cuda_grouped_gemm
for f in PersistentSwiGlus PersistentScatters EveryTiledSchedule.GivesTheExactResult/0; do
  timeout 100 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter="*$f*" \
    > $OUT/t/racecheck-${f%%.*}.log 2>&1; echo "racecheck $f: rc=$? $(grep -h 'RACECHECK SUMMARY\|ERROR SUMMARY' $OUT/t/racecheck-${f%%.*}.log | tail -1) $(grep -c '^\[       OK' $OUT/t/racecheck-${f%%.*}.log) OK at $((SECONDS-start)) s"
done
run_test test_cuda_layer
run_test test_cuda_tensor_core
run_test test_cuda_uploads
(cd build-gpu && timeout 150 ctest -R 'PinnedUploads\.EpLayers' --output-on-failure > $OUT/t/ctest-ep.log 2>&1
 echo "ctest PinnedUploads.EpLayers: rc=$? $(grep 'tests passed' $OUT/t/ctest-ep.log)")
grep -E "^\[  FAILED|Failure|Expected|Which is|differ|first at" $OUT/t/gpu-tests.log | head -30
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
