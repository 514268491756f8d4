#!/usr/bin/env bash
# One call for three things, each under its own folder of $OUT:
# - tests/: the tensor-core suite's graph-replay test, which times a forward's stages (the routed experts'
#   new run alone among them), at $1 (the carried build-carry-packed);
# - figures/: on an H200 only, the README's figures at $1;
# - stamps/: on any GPU, the CTA stamps and the one-block routing kernel's stamps: stamps-and-route.patch put
#   on the tree and its own carried build (build-carry-stamps-packed, `bash bench/carry_build.sh
#   steadymoe_cli` with the patch applied) taken: call.sh's deepseek-v4-flash runs, then qwen3-30b-a3b bf16 at
#   one token three times for the routing kernel's stamps.
top=$OUT
here=bench/results/2026-12-07-cuda-fp4-cta-stamps
(
  export OUT=$top/tests; mkdir -p "$OUT"
  source bench/call_common.sh "$1"
  tests() { build_gpu steadymoe_cli test_cuda_tensor_core || return 1; run_test test_cuda_tensor_core "" "*GraphReplays*"; }
  call_tests tests
  call_end
)
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  export OUT=$top/figures; mkdir -p "$OUT"
  bash bench/results/2026-12-07-cuda-readme-figures/call.sh "$1"
else
  echo "not an H200: README figures not run"
fi
export OUT=$top/stamps; mkdir -p "$OUT"
patch -s -p1 < $here/stamps-and-route.patch || { echo "stamps-and-route.patch does not apply"; exit 1; }
rm -rf build-carry-packed build-carry build-gpu && mv build-carry-stamps-packed build-carry-packed
bash $here/call.sh "$1+stamps"
for r in 1 2 3; do
  ./build-gpu/steadymoe bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 1 > "$OUT/qwen3-$r.log" 2>&1
  echo "== qwen3 one token, run $r: rc=$?"
  grep -E "ROUTESTAMPS|^ *1 " "$OUT/qwen3-$r.log" | cut -c1-260
done
