#!/usr/bin/env bash
# Session call 4 (the device time left, about 240 s): at $1, the profiler's sampled stalls per SASS instruction of
# the first 8-token FP4 x e4m3 decode-kernel launch (deepseek-v4-flash's routed gate/up at 8 tokens, launched
# eagerly), picked by its mangled name.
set -u
start=$SECONDS
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/configure.log 2>&1
cmake --build build-gpu --target steadymoe_cli -j 16 > $OUT/build.log 2>&1 || { grep -E error -A5 $OUT/build.log | head -20; exit 1; }
echo "built at $((SECONDS-start)) s"
/usr/local/cuda/bin/ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:WeightCodeE2ELb1ELi8ELi6E" \
  --launch-skip 0 --launch-count 1 --section SourceCounters --section WarpStateStats -f -o $OUT/sass-v4-8 \
  ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 8 --repeat 1 \
  --graph-max-tokens 0 --json $OUT/v4-8.json > $OUT/sass-v4-8.log 2>&1
echo "profiled (rc=$?) at $((SECONDS-start)) s"
/usr/local/cuda/bin/ncu --import $OUT/sass-v4-8.ncu-rep --page source --print-source sass --csv > $OUT/sass-v4-8.csv 2>>$OUT/sass-v4-8.log
python3 bench/sass_stalls.py $OUT/sass-v4-8.csv > $OUT/sass.txt 2>&1
/usr/local/cuda/bin/ncu --import $OUT/sass-v4-8.ncu-rep --page details --csv > $OUT/details.csv 2>>$OUT/sass-v4-8.log
echo "done at $((SECONDS-start)) s"
