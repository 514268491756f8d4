#!/usr/bin/env bash
# Session call 1: every GPU test at $1 (e4m3 MMAs start each block's sum; epilogue rows read once; turns
# variant), deepseek-v3 fp8 free-running against warpgroups taking turns, racecheck of the schedule test with
# the disassembly of the kernels it names, and the sampled stalls per instruction of two prefill GEMMs.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
nv=/usr/local/cuda/bin
mkdir -p $OUT/b
timeout 260 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
timeout 60 $nv/compute-sanitizer --tool racecheck --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm --gtest_filter='NBlocks/*' > $OUT/b/racecheck.log 2>&1
echo "racecheck (schedule test): rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED' $OUT/b/racecheck.log | tr '\n' ' ') at $((SECONDS-start)) s" >> $OUT/tests.txt
$nv/cuobjdump -sass build-gpu/libsteadymoe.a > /tmp/all.sass 2>/dev/null
python3 - $OUT/b/racecheck.log /tmp/all.sass $OUT/b <<'PY'
import re, sys
log, sass, out = sys.argv[1:]
names = set(re.findall(r"(grouped_gemm_sm90_kernel<[^>]*>)", open(log, errors="replace").read()))
print("kernels named by racecheck:", names)
blocks = re.split(r"\n\s*Function : ", open(sass, errors="replace").read())
for b in blocks[1:]:
    name = b.split("\n", 1)[0].strip()
    if "grouped_gemm_sm90_kernel" in name and ("ELb1ELb0ELi2ELi1ELb1E" in name and "WeightCodeE0" in name):
        open(f"{out}/bf16-scaled-persistent.sass", "w").write(name + "\n" + b)
        print("wrote", name, len(b))
PY
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 150 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run v3-free X=1 -- --workload deepseek-v3 --format fp8 --tokens 4096,16384
run v3-turns STEADYMOE_ORDERED_WARPGROUPS=1 -- --workload deepseek-v3 --format fp8 --tokens 4096,16384
NCU_SKIP=3 timeout 150 bench/run_gpu.sh $OUT/s sass deepseek-v3:fp8 > $OUT/sass.txt 2>&1
echo "sass v3 done at $((SECONDS-start)) s" >> $OUT/sass.txt
NCU_SKIP=1 timeout 90 bench/run_gpu.sh $OUT/q sass qwen3-30b-a3b:bf16 >> $OUT/sass.txt 2>&1
echo "all done at $((SECONDS-start)) s" >> $OUT/sass.txt
rm -f $OUT/t/device.txt $OUT/s/device.txt $OUT/q/device.txt
cd $OUT && tar czf b.tgz b t s q && rm -rf b t s q
