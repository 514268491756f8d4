#!/usr/bin/env bash
# Call 4 (s41; commit in $1; build-gpu kept from call 3): deepseek-v3's upload with the next batch's layouts
# made while a batch is copied against build-base without that (overlap.patch taken off), alternating; the
# PinnedUploads ctest entries (now on three threads); the ctest
# entries that run the grouped GEMM and the layers under other parked and clustered forms (ParkedSwiGlu,
# QuadCtas, WideCtas, RegisterScatter); racecheck on tests that reported the stage protocol's copies against
# shared loads in bench/results/2026-12-04-cuda-route-permute.md (section 4), under this machine's compute-
# sanitizer.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
source bench/device_tests.sh
{
build_gpu steadymoe_cli test_cuda_grouped_gemm test_cuda_layer test_cuda_tensor_core test_cuda_uploads test_cuda_ep || exit 1
# (build-base holds call 3's objects of 7cd300b, newer than this tree's copied files: the files that differ
# from 7cd300b are touched so that they build again)
touch src/kernels/cuda/async_barrier.cuh src/kernels/cuda/expert_group.cpp src/kernels/cuda/grouped_gemm_sm90.cu src/kernels/cuda/weight_layouts.cpp src/kernels/cuda/weight_layouts.hpp
build_base bench/tmp-call/s41/overlap.patch steadymoe_cli || exit 1
source bench/bench_runs.sh
B=./build-base/steadymoe
v3=(--workload deepseek-v3 --format fp8 --tokens 1 --repeat 1)
bench_run v3 - "${v3[@]}"; BENCH_CLI=$B bench_run v3base - "${v3[@]}"; unset BENCH_CLI
bench_run v3-2 - "${v3[@]}"; BENCH_CLI=$B bench_run v3base2 - "${v3[@]}"; unset BENCH_CLI
for n in v3 v3base v3-2 v3base2; do echo "== $n: $(grep -h -A1 'uploading the layer' $OUT/t/$n.log | tr '\n' ' ')"; done
(cd build-gpu && timeout 150 ctest -j3 -R 'PinnedUploads' --output-on-failure > $OUT/t/ctest-pinned.log 2>&1
 echo "ctest PinnedUploads (three threads: batches laid out while copied): rc=$? $(grep 'tests passed' $OUT/t/ctest-pinned.log)")
(cd build-gpu && timeout $((350 - (SECONDS - start))) ctest -j2 -R 'ParkedSwiGlu|QuadCtas|WideCtas|RegisterScatter' --output-on-failure > $OUT/t/ctest-entries.log 2>&1
 echo "ctest ParkedSwiGlu|QuadCtas|WideCtas|RegisterScatter: rc=$? $(grep 'tests passed' $OUT/t/ctest-entries.log)")
grep -E "Failed|\*\*\*" $OUT/t/ctest-entries.log | head
for f in DecodeKernelPartialTilesAndSplits IndexedRows FewRowCtas; do
  (( SECONDS - start < 300 )) || { echo "racecheck $f: skipped (time)"; continue; }
  timeout 60 $san --tool racecheck build-gpu/tests/test_cuda_grouped_gemm --gtest_filter="*$f*" \
    > $OUT/t/racecheck-$f.log 2>&1; echo "racecheck $f: rc=$? $(grep -h 'RACECHECK SUMMARY' $OUT/t/racecheck-$f.log | tail -1) $(grep -c '^\[       OK' $OUT/t/racecheck-$f.log) OK at $((SECONDS-start)) s"
done
echo "call done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
cd $OUT && tar czf t.tgz t && rm -rf t
