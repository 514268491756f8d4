#!/usr/bin/env bash
# Session call 4: every GPU test at the paired-CTA commit (remote releases at CTA scope), memcheck of the
# paired schedule test, and the benches paired against unpaired in one call, then the peers.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
timeout 330 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
timeout 120 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
  --gtest_filter='NBlocks/*' > $OUT/b/memcheck.log 2>&1
echo "memcheck (paired schedule test): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' $OUT/b/memcheck.log | tr '\n' ' ')" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 150 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run q-paired X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,4096,16384
run q-unpaired STEADYMOE_PAIRED_CTAS=0 -- --workload qwen3-30b-a3b --format bf16 --tokens 4096,16384
run v3-paired X=1 -- --workload deepseek-v3 --format fp8 --tokens 1,128,4096,16384
run v3-unpaired STEADYMOE_PAIRED_CTAS=0 -- --workload deepseek-v3 --format fp8 --tokens 16384
run v4-paired X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 8,4096,16384
run v4-unpaired STEADYMOE_PAIRED_CTAS=0 -- --workload deepseek-v4-flash --format fp4 --tokens 16384
timeout $((540-SECONDS+start)) python3 bench/gpu_peers.py $OUT/b/peers.json $OUT/b/q-paired.json $OUT/b/v3-paired.json > $OUT/peers.md 2>&1
echo "all done at $((SECONDS-start)) s" >> $OUT/bench.txt
rm -f $OUT/t/device.txt
cd $OUT && tar czf b.tgz b t && rm -rf b t
