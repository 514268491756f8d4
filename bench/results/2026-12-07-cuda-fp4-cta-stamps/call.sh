#!/usr/bin/env bash
# Every CTA's steps in deepseek-v4-flash's one-token FP4 GEMMs (stamps.patch applied at $1, carried: `bash
# bench/carry_build.sh steadymoe_cli`): the bench at one token prints, for the last gate/up and down launch of
# the 8-token FP4 x e4m3 CTAs four to an SM, each step's time after the launch's first CTA's entry
# (percentiles over its 384 CTAs) and how many CTAs each SM ran. As built, then with the weights' early copies
# held back (STEADYMOE_EARLY_WEIGHTS=0), then as built again.
source bench/call_common.sh "$1"
tests() { build_gpu steadymoe_cli || return 1; }
call_tests tests || exit 1
for run in as-built early-off as-built-again; do
  knob=$([[ $run == early-off ]] && echo STEADYMOE_EARLY_WEIGHTS=0 || echo STEADYMOE_UNSET=1)
  env $knob ./build-gpu/steadymoe bench --backend cuda --workload deepseek-v4-flash --format fp4 --tokens 1 \
    > "$OUT/t/$run.log" 2>&1
  echo "== $run ($knob): rc=$? at $((SECONDS - start)) s"
  grep -E "CTASTAMPS|^ *1 " "$OUT/t/$run.log" | cut -c1-200
done
call_end
