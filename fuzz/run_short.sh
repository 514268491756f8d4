#!/usr/bin/env bash
# Runs each fuzzer for a short while on a scratch copy of its seed corpus.
#   fuzz/run_short.sh BUILD_DIR SECONDS
# BUILD_DIR is a build configured with -DSTEADYMOE_FUZZ=ON (the fuzzers live in BUILD_DIR/fuzz).
# Exits non-zero when any fuzzer finds a crash, leak, timeout or sanitizer report; the reproducer is
# kept in the scratch directory it prints. Nothing is written into the source tree.
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build_dir=$1
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/steadymoe_fuzz.XXXXXX")

status=0
for target in safetensors config; do
  exe="$build_dir/fuzz/fuzz_$target"
  [ -x "$exe" ] || exe="$build_dir/fuzz_$target"
  if [ ! -x "$exe" ]; then
    echo "fuzz_$target: not found under $build_dir (configure with -DSTEADYMOE_FUZZ=ON and build it)" >&2
    status=1
    continue
  fi
  work="$scratch/$target"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$here/corpus/$target/"* "$work/corpus/"
  # The seeds may be read-only in a checkout; libFuzzer adds new inputs beside them.
  chmod -R u+w "$work/corpus"
  echo "== fuzz_$target for ${seconds}s (corpus and artifacts in $work)"
  if "$exe" -max_total_time="$seconds" -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
      "$work/corpus" >"$work/log.txt" 2>&1; then
    grep -E '^stat::number_of_executed_units|Done [0-9]+ runs' "$work/log.txt" | tail -2
  else
    echo "fuzz_$target FAILED; last lines of $work/log.txt:" >&2
    tail -40 "$work/log.txt" >&2
    ls "$work/artifacts" >&2
    status=1
  fi
done

if [ $status -eq 0 ]; then
  rm -rf "$scratch"
else
  echo "kept $scratch for inspection" >&2
fi
exit $status
