#!/usr/bin/env bash
# Session call 2: every GPU test at $1 with all variants (dependent launches, and without them), then the
# layer from one token up with and without dependent launches: qwen3 bf16, deepseek-v3 fp8, deepseek-v4 fp4
# (and the route kernel's two rounds of loads); then the one-token deepseek-v3 GEMMs' stalls.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
timeout 280 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  (( SECONDS - start < 470 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 100 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,16384
run q-plain STEADYMOE_DEPENDENT_LAUNCHES=0 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,16384
run v3 X=1 -- --workload deepseek-v3 --format fp8 --tokens 1,128,16384
run v3-plain STEADYMOE_DEPENDENT_LAUNCHES=0 -- --workload deepseek-v3 --format fp8 --tokens 1,128
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8
run v4-plain STEADYMOE_DEPENDENT_LAUNCHES=0 -- --workload deepseek-v4-flash --format fp4 --tokens 1,8
# Where a one-token deepseek-v3 layer's GEMMs stall (router, shared and routed gate/up and down).
(( SECONDS - start < 420 )) && NCU_KERNELS=grouped_gemm_sm90 NCU_COUNT=5 BENCH_ARGS="--tokens 1 --repeat 1" timeout 100 bench/run_gpu.sh $OUT/n ncu deepseek-v3:fp8 > $OUT/ncu.txt 2>&1
echo "(ncu done at $((SECONDS-start)) s)" >> $OUT/bench.txt
rm -f $OUT/t/device.txt $OUT/n/device.txt
cd $OUT && tar czf b.tgz b t n && rm -rf b t n
