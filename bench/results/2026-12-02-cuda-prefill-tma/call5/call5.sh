#!/usr/bin/env bash
# Session call 5 (short): compute-sanitizer over this session's new kernels — the chunked permutation
# (racecheck for its shared-memory rounds), the combine, the quantise-once gather and the bf16 epilogues.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1
cmake --build build-gpu -j 16 --target test_cuda_permutation test_cuda_combine test_cuda_grouped_gemm > $OUT/build.log 2>&1 || { grep -A5 error $OUT/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/sanitize.txt
san=/usr/local/cuda/bin/compute-sanitizer
for tool in racecheck memcheck initcheck; do
  for run in "test_cuda_permutation:*" "test_cuda_combine:*" "test_cuda_grouped_gemm:CudaGroupedGemm.Quantising*:CudaGroupedGemm.Bf16Epilogues*"; do
    t=${run%%:*}; filter=${run#*:}
    timeout 45 $san --tool $tool --error-exitcode 3 build-gpu/tests/$t --gtest_filter="$filter" > $OUT/sanitize-$tool-$t.log 2>&1
    echo "compute-sanitizer $tool ($t): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/sanitize-$tool-$t.log | tr '\n' ' ') at $((SECONDS-start)) s" >> $OUT/sanitize.txt
  done
done
cd $OUT && tar czf logs.tgz --remove-files ./*.log
