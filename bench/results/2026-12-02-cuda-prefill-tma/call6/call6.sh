#!/usr/bin/env bash
# Session call 6 (short): racecheck reported shared-memory hazards in the persistent tiled kernel with
# widened FP8 weights (bf16 rows, scaled) in call 5. Which schedules show them, and the SASS at the
# reported offsets; initcheck again on the permutation and grouped-GEMM tests (outputs now initialised).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1
cmake --build build-gpu -j 16 --target test_cuda_permutation test_cuda_grouped_gemm > $OUT/build.log 2>&1 || { grep -A5 error $OUT/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/race.txt
san=/usr/local/cuda/bin/compute-sanitizer
f='CudaGroupedGemm.Bf16Epilogues*'
for v in default STEADYMOE_TILED_SCHEDULE=per-tile STEADYMOE_TILED_SCHEDULE=persistent STEADYMOE_ROW_TENSOR_COPIES=0; do
  knob=(); [[ $v != default ]] && knob=("$v")
  env "${knob[@]}" timeout 40 $san --tool racecheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter="$f" > $OUT/race-${v//[^a-z0-9]/_}.log 2>&1
  echo "racecheck $v: rc=$? $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $OUT/race-${v//[^a-z0-9]/_}.log | tr '\n' ' ')" >> $OUT/race.txt
done
for t in test_cuda_permutation test_cuda_grouped_gemm; do
  timeout 60 $san --tool initcheck --error-exitcode 3 build-gpu/tests/$t --gtest_filter='CudaPermutation.*:CudaGroupedGemm.Quantising*:CudaGroupedGemm.Bf16Epilogues*' > $OUT/init-$t.log 2>&1
  echo "initcheck $t: rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/init-$t.log | tr '\n' ' ')" >> $OUT/race.txt
done
# The SASS around every offset racecheck named (the kernel lives in the library, linked into the test).
offsets=$(grep -ohE '\+0x[0-9a-f]+' $OUT/race-*.log | sort -u | sed 's/+0x//' | head -24)
/usr/local/cuda/bin/cuobjdump -sass build-gpu/tests/test_cuda_grouped_gemm > $OUT/all.sass 2>/dev/null
awk '/Function : /{fn=$0} {print fn "\t" $0}' $OUT/all.sass | grep -E "Function : .*grouped_gemm_sm90_kernel.*WeightCodeE1ELb1ELb0ELi2ELi1ELb1E" > $OUT/k.sass
for o in $offsets; do
  p=$(printf '%04x' 0x$o)
  echo "=== +0x$o" >> $OUT/sass-at-offsets.txt
  grep -n -B6 -A1 "/\*$p\*/" $OUT/k.sass | cut -f2 | cut -c1-110 >> $OUT/sass-at-offsets.txt
done
echo "done at $((SECONDS-start)) s" >> $OUT/race.txt
rm -f $OUT/all.sass
cd $OUT && tar czf logs.tgz --remove-files ./*.log k.sass
