#!/usr/bin/env bash
# Session call 2: at $1 (decode batches in tiles as tall as the decode kernel's CTAs; FP4 x e4m3 CTAs of 8 tokens
# with a stage's two blocks multiplied at once). Every GPU test with each variant; then, in one binary, the new
# defaults against STEADYMOE_FP4_THIN_CTAS=0 (16-token CTAs) and STEADYMOE_DECODE_TILES=full (128-row tiles);
# the profiler on v4's routed gate/up at one token.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
bash bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env setting (or -), then bench args
  local name=$1 knob=$2; shift 2
  (( SECONDS - start < 500 )) || { echo "($name skipped: the call's time is nearly spent)" >> $OUT/bench.txt; return; }
  echo "=== $name ($knob)" >> $OUT/bench.txt
  if [[ $knob == - ]]; then knob=STEADYMOE_UNSET=1; fi
  env $knob timeout 120 $b bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
d="--tokens 1,8,128,256"
run v4 - --workload deepseek-v4-flash --format fp4 $d
run v4-n16 STEADYMOE_FP4_THIN_CTAS=0 --workload deepseek-v4-flash --format fp4 $d
run v4-full STEADYMOE_DECODE_TILES=full --workload deepseek-v4-flash --format fp4 $d
run q - --workload qwen3-30b-a3b --format bf16 $d
run q-full STEADYMOE_DECODE_TILES=full --workload qwen3-30b-a3b --format bf16 $d
run v4-again - --workload deepseek-v4-flash --format fp4 $d
run v3 - --workload deepseek-v3 --format fp8 $d
run v3-full STEADYMOE_DECODE_TILES=full --workload deepseek-v3 --format fp8 --tokens 1,8,128
if (( SECONDS - start < 540 )); then
  /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base mangled --kernel-name regex:WeightCodeE2ELb1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
    -f -o $OUT/t/fp4-T1 $b bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1 --repeat 1 > $OUT/t/fp4-T1.log 2>&1
  /usr/local/cuda/bin/ncu --import $OUT/t/fp4-T1.ncu-rep --page details --csv > $OUT/t/fp4-T1-details.csv 2>/dev/null
  python3 bench/ncu_table.py $OUT/t/fp4-T1-details.csv > $OUT/profile.txt
  /usr/local/cuda/bin/ncu --import $OUT/t/fp4-T1.ncu-rep --page source --print-source sass --csv > $OUT/t/fp4-T1-sass.csv 2>/dev/null
  python3 bench/sass_stalls.py $OUT/t/fp4-T1-sass.csv 25 >> $OUT/profile.txt
fi
cd $OUT && tar czf t.tgz t && rm -rf t
