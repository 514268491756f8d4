#!/usr/bin/env bash
# Session call 2: at $1 (the graph-count test runs its largest batch first). The tensor-core tests (also with
# the mma.sync kernel and with STEADYMOE_DECODE_KERNEL=tiled); GPU time per kernel of decode layers (qwen3 bf16
# at 8 and 128 tokens, deepseek-v3 fp8 at 1 with 64 experts); deepseek-v3 fp8 at 1 and 4096 tokens with and
# without dependent launches; then the FP8 decode kernel's shape: 3 stages x 5 CTAs per SM (built) against
# 4 x 4 (the source edited by sed, rebuilt), deepseek-v3 with 64 experts at 1, 8, 128 tokens.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 > $OUT/b/build.log 2>&1 || { grep -E "error" -A5 $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/tests.txt
for v in X=1 STEADYMOE_GEMM_KERNEL=mma STEADYMOE_DECODE_KERNEL=tiled; do
  echo "=== test_cuda_tensor_core ($v)" >> $OUT/b/gpu-tests.log
  env $v timeout 60 build-gpu/tests/test_cuda_tensor_core >> $OUT/b/gpu-tests.log 2>&1; echo "test_cuda_tensor_core ($v): rc=$?" >> $OUT/tests.txt
done
grep -E "^===|^\[  (PASSED|FAILED) |Failure" $OUT/b/gpu-tests.log >> $OUT/tests.txt
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
for spec in "qwen3-30b-a3b bf16 8 0" "qwen3-30b-a3b bf16 128 0" "deepseek-v3 fp8 1 64"; do
  set -- $spec
  /usr/local/cuda/bin/ncu --clock-control none --csv --metrics gpu__time_duration.sum $b bench --backend cuda --workload $1 --format $2 \
    --tokens $3 --experts $4 --repeat 1 --json $OUT/b/p.json > $OUT/b/k-$1-$3.csv 2> $OUT/b/k-$1-$3.err
  echo "== $1 $2 T=$3 experts=$4 (rc=$?)" >> $OUT/kernels.txt
  python3 bench/kernel_times.py $OUT/b/k-$1-$3.csv >> $OUT/kernels.txt 2>&1
done
echo "profiles done at $((SECONDS-start)) s" >> $OUT/tests.txt
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 480 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 90 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
v3=(--workload deepseek-v3 --format fp8 --tokens 1,4096)
run v3 X=1 -- "${v3[@]}"
run v3-plain STEADYMOE_DEPENDENT_LAUNCHES=0 -- "${v3[@]}"
s=(--workload deepseek-v3 --format fp8 --experts 64 --tokens 1,8,128)
run v3e64-3x5 X=1 -- "${s[@]}"
if (( SECONDS - start < 400 )); then
  sed -i 's/kCode == WeightCode::Fp4 ? 4 : 3;/kCode == WeightCode::Bf16 ? 3 : 4;/; s/kCode == WeightCode::Bf16 ? 3 : 5;/kCode == WeightCode::Bf16 ? 3 : 4;/' src/kernels/cuda/grouped_gemm_sm90_decode.cu
  grep -n "kStages =\|kCtasPerSm =" src/kernels/cuda/grouped_gemm_sm90_decode.cu >> $OUT/bench.txt
  cmake --build build-gpu -j 16 --target steadymoe_cli > $OUT/b/build2.log 2>&1 || cmake --build build-gpu -j 16 > $OUT/b/build2.log 2>&1
  echo "(rebuilt at $((SECONDS-start)) s)" >> $OUT/bench.txt
  run v3e64-4x4 X=1 -- "${s[@]}"
fi
cd $OUT && tar czf b.tgz b && rm -rf b
