#!/usr/bin/env bash
# The README's speed table in one device call: the bench points its rows read (decode floor / routed, stage-timed
# and alone, at 1, 8, 128 and 256 tokens, layer / experts at 1, 8, 128 and 16384, prefill TFLOP/s at 16384;
# block-exact FP4 weights at 16384), each workload run RUNS times (2 unless set), then the peers and dense rates
# beside them (bench/gpu_peers.py on the first run's records) and a line per point (bench_points). Run from the
# repository root as a call's command, with the CLI carried (`bash bench/carry_build.sh steadymoe_cli`, `carry:
# ["build-carry-packed"]`) or built there:
#   bash bench/readme_figures.sh LABEL        (LABEL: the commit the records name)
# One round of the four bench runs took about 40 s on an H200 (bench/results/2026-12-06-cuda-wide-epilogue.md,
# call 4); BENCH_BUDGET_S (540 unless set) skips what would run past the call's limit, the peers last.
source bench/call_common.sh "$1"
build_gpu steadymoe_cli || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee "$OUT/device.txt"
BENCH_BUDGET_S=${BENCH_BUDGET_S:-540}
for r in $(seq 1 "${RUNS:-2}"); do
  bench_run q-$r - --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,16384
  bench_run v3-$r - --workload deepseek-v3 --format fp8 --tokens 1,8,128,16384
  bench_run v4-$r - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256,16384
  bench_run v4x-$r STEADYMOE_FP4_BLOCK_EXACT=1 --workload deepseek-v4-flash --format fp4 --tokens 16384
done
grep -E "^(===|16384 |256 |128 |8 |1 |\()" "$OUT/bench.txt" | cut -c1-250
records=()
for n in q-1 v3-1 v4-1; do [[ -f $OUT/t/$n.json ]] && records+=("$OUT/t/$n.json"); done
if (( SECONDS - start < BENCH_BUDGET_S && ${#records[@]} > 0 )); then
  python3 bench/gpu_peers.py "$OUT/peers.json" "${records[@]}" > "$OUT/peers.txt" 2>&1
  cat "$OUT/peers.txt"
else
  echo "(peers skipped: the call's time is nearly spent, or no record)"
fi
call_end
