#!/usr/bin/env bash
# Session call 1: at $1 (last session's unrun commits: tile-by-tile decode order restored, review fixes, the
# fp4-fp8 tensor-core test format). Every GPU test with each variant; deepseek-v4-flash fp4 at 1 .. 16384,
# qwen3 bf16 and deepseek-v3 fp8 at 1 .. 256; the profiler on v4's routed gate/up at one and eight tokens.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, then bench args
  local name=$1; shift
  (( SECONDS - start < 480 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name" >> $OUT/bench.txt
  timeout 120 $b bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run v4 --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,4096,16384
run q --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256
run v3 --workload deepseek-v3 --format fp8 --tokens 1,8,128,256
prof() {  # name, skip, tokens
  (( SECONDS - start < 530 )) || return
  /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base mangled --kernel-name regex:WeightCodeE2ELb1 --launch-skip $2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
    -f -o $OUT/t/$1 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens $3 --repeat 1 > $OUT/t/$1.log 2>&1
  /usr/local/cuda/bin/ncu --import $OUT/t/$1.ncu-rep --page details --csv > $OUT/t/$1-details.csv 2>/dev/null
  echo "=== $1" >> $OUT/profile.txt
  python3 bench/ncu_table.py $OUT/t/$1-details.csv >> $OUT/profile.txt
  /usr/local/cuda/bin/ncu --import $OUT/t/$1.ncu-rep --page source --print-source sass --csv > $OUT/t/$1-sass.csv 2>/dev/null
  python3 bench/sass_stalls.py $OUT/t/$1-sass.csv 25 >> $OUT/profile.txt
}
prof fp4-T1 0 1
prof fp4-T8 0 8
cd $OUT && tar czf t.tgz t && rm -rf t
