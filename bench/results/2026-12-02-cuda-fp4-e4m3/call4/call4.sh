#!/usr/bin/env bash
# Session call 4: at $1 (FP4 x e4m3 decode CTAs: four group MMAs at once; decode CTAs dispatched chunk by chunk). Every
# GPU test with each variant (bench/run_gpu.sh OUT tests); qwen3 bf16, deepseek-v3 fp8 and deepseek-v4-flash fp4 at
# 1 .. 256 tokens (v4 also 4096, 16384); the profiler on v4's routed gate/up at one token.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, then bench args
  local name=$1; shift
  (( SECONDS - start < 470 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  timeout 120 $b bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run v4 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384
run q --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
run v3 --workload deepseek-v3 --format fp8 --tokens 1,8,128
if (( SECONDS - start < 500 )); then
  /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base mangled --kernel-name regex:WeightCodeE2ELb1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
    -f -o $OUT/t/fp4-T1 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1 --repeat 1 > $OUT/t/fp4-T1.log 2>&1
  /usr/local/cuda/bin/ncu --import $OUT/t/fp4-T1.ncu-rep --page details --csv > $OUT/t/fp4-T1-details.csv 2>/dev/null
  python3 bench/ncu_table.py $OUT/t/fp4-T1-details.csv > $OUT/profile.txt
  /usr/local/cuda/bin/ncu --import $OUT/t/fp4-T1.ncu-rep --page source --print-source sass --csv > $OUT/t/fp4-T1-sass.csv 2>/dev/null
  python3 bench/sass_stalls.py $OUT/t/fp4-T1-sass.csv 30 >> $OUT/profile.txt
fi
cd $OUT && tar czf t.tgz t && rm -rf t
