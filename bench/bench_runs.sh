# Sourced by a device call's script (after `start=$SECONDS`): bench_run NAME KNOB ARGS... runs
# `steadymoe bench --backend cuda ARGS` under the environment KNOB sets (NAME=VALUE, several separated by
# spaces, or - for none), appending its table to $OUT/bench.txt and writing its records to $OUT/t/NAME.json
# and its whole output, the timed progress lines of its setup included, to $OUT/t/NAME.log.
# Once the call has run BENCH_BUDGET_S seconds (480 unless set) the rest are skipped, so that the call ends
# inside its limit with what it has. BENCH_CLI=PATH runs another build's CLI (one built in the same call from
# an older commit, to compare): the table's header line names it.
# compare_named NAME... then writes $OUT/compare.md (bench/compare_runs.py) and $OUT/stages.md
# (bench/stage_table.py) over those runs that left a record, in that order, and prints both.
# bench_points prints a line per point of every record in $OUT/t: the run, tokens, output digest, the layer as
# served (untimed), the routed stage and its gate/up and down GEMMs (µs).
bench_run() {
  local name=$1 knob=$2 cli=${BENCH_CLI:-./build-gpu/steadymoe}; shift 2
  if (( SECONDS - start >= ${BENCH_BUDGET_S:-480} )); then
    echo "($name skipped: the call's time is nearly spent)" >> "$OUT/bench.txt"
    return
  fi
  echo "=== $name ($knob${BENCH_CLI:+, $BENCH_CLI})" >> "$OUT/bench.txt"
  [[ $knob == - ]] && knob=STEADYMOE_UNSET=1
  env $knob timeout 120 "$cli" bench --backend cuda "$@" --json "$OUT/t/$name.json" > "$OUT/t/$name.log" 2>&1
  grep -v "^\[bench" "$OUT/t/$name.log" >> "$OUT/bench.txt"
  echo "($name done at $((SECONDS - start)) s)" >> "$OUT/bench.txt"
}
compare_named() {
  local runs=() n
  for n in "$@"; do [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
  (( ${#runs[@]} > 0 )) || { echo "compare_named: none of $* left a record"; return 1; }
  python3 bench/compare_runs.py "${runs[@]}" > "$OUT/compare.md" 2>&1
  python3 bench/stage_table.py "${runs[@]}" > "$OUT/stages.md" 2>&1
  cat "$OUT/compare.md" "$OUT/stages.md"
}
bench_points() {
  python3 - "$OUT"/t <<'POINTS'
import glob, json, os, sys
def us(p, key):  # (an older build's record may lack a field)
    return round(p[key], 1) if key in p else "-"
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    for p in json.load(open(path))["points"]:
        print(os.path.basename(path), p["tokens"], p.get("output_fnv1a"),
              "untimed", us(p, "layer_untimed_us"), "routed", us(p, "routed_us"), us(p, "gate_up_us"), us(p, "down_us"),
              "alone", us(p, "routed_untimed_us"))
POINTS
}
