#!/usr/bin/env bash
# Session call 5 (the last device time): at $1, qwen3 bf16 at 32, 64, 256 tokens on the decode kernel
# (16 tokens to a CTA: an expert's 17-32 rows take two CTAs that read its weights twice) and on the tiled
# kernel's 64-row CTAs (STEADYMOE_DECODE_KERNEL=tiled).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/b
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null 2>&1
cmake --build build-gpu -j 16 --target steadymoe_cli > $OUT/b/build.log 2>&1 || { grep -E "error" -A5 $OUT/b/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s" > $OUT/bench.txt
for v in X=1 STEADYMOE_DECODE_KERNEL=tiled; do
  echo "=== $v" >> $OUT/bench.txt
  env $v timeout 60 ./build-gpu/steadymoe bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 32,64,256 \
    --json $OUT/b/q-${v%%=*}.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
done
cd $OUT && tar czf b.tgz b && rm -rf b
