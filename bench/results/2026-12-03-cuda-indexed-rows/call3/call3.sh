#!/usr/bin/env bash
# Session call 3: at $1 (the landed device code, 6be2abe's). Where the FP4 x e4m3 decode kernel's warps stall,
# per SASS instruction: deepseek-v4-flash's first routed gate/up launch at 16384 tokens (64-token CTAs) and at
# 8 tokens (8-token CTAs), the profiler's sampled stalls (bench/sass_stalls.py).
set -u
export STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1
cmake --build build-gpu -j 16 --target steadymoe_cli > $OUT/build.log 2>&1 || { grep -E error -A5 $OUT/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
ncu=/usr/local/cuda/bin/ncu
for run in "wide:16384" "thin:8"; do
  name=${run%%:*}; tokens=${run#*:}
  timeout 200 $ncu --clock-control none --kernel-name regex:decode_kernel --launch-skip 0 --launch-count 1 \
    --section SourceCounters --section WarpStateStats -f -o $OUT/sass-$name ./build-gpu/steadymoe bench --backend cuda \
    --workload deepseek-v4-flash --format fp4 --tokens $tokens --repeat 1 > $OUT/sass-$name.log 2>&1
  echo "profile $name rc=$? at $((SECONDS-start)) s"
  $ncu --import $OUT/sass-$name.ncu-rep --page source --print-source sass --csv > $OUT/sass-$name.csv 2>> $OUT/sass-$name.log
  $ncu --import $OUT/sass-$name.ncu-rep --page details > $OUT/details-$name.txt 2>> $OUT/sass-$name.log
  echo "== $name ($tokens tokens)" >> $OUT/sass.txt
  python3 bench/sass_stalls.py $OUT/sass-$name.csv >> $OUT/sass.txt 2>&1
done
( cd $OUT && tar czf raw.tgz --remove-files ./sass-*.csv ./sass-*.ncu-rep ) || true
head -c 6000 $OUT/sass.txt
grep -E "Duration|Registers|Achieved Occupancy|Warp Cycles Per Issued|Issue Slots Busy|Block Size|Grid Size" $OUT/details-*.txt | head -30
