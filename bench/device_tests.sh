# Sourced by a device call's script (after `start=$SECONDS`):
# - build_gpu TARGET... configures build-gpu (Release, Ninja) and builds the targets, logging to
#   $OUT/t/configure-build.log and $OUT/t/build.log; on a failure it prints the errors and returns 1 (the script then
#   stops: `build_gpu ... || exit 1`), else prints when the build was done;
# - build_base PATCH TARGET... builds the targets in build-base from the tree with PATCH (a `git diff OLD NEW`
#   of the call's tree, saved beside the script) taken back, then puts the tree back: the older build to run
#   beside this one on the same machine (bench_runs.sh's BENCH_CLI); logs $OUT/t/build-base.log;
# with build-gpu built:
# - run_test BINARY [KNOB] [FILTER] runs build-gpu/tests/BINARY (its tests matching FILTER, if given) under
#   the environment KNOB sets (NAME=VALUE, several separated by spaces; none if empty), appending what it
#   prints to $OUT/t/gpu-tests.log under a line naming the run, and prints its exit status and the passed
#   tests so far;
# - memcheck BINARY [FILTER] runs it under compute-sanitizer's memcheck into $OUT/t/memcheck-BINARY.log and
#   prints the error summary;
# - tests_passed FILE prints the failures logged and returns 1 where FILE (what the call's tests printed)
#   holds a nonzero exit status, packing $OUT/t first (a call then ends with no timing:
#   `tests_passed $OUT/tests.txt || exit 1`).
# (configure_and_build DIR LOG TARGET...: the step both builds take, logging to $OUT/t/configure-LOG.log and
# $OUT/t/LOG.log, the errors printed on a failure)
configure_and_build() {
  local dir=$1 log=$2; shift 2
  mkdir -p "$OUT/t"
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/t/configure-$log.log" 2>&1 \
    || { tail -20 "$OUT/t/configure-$log.log"; return 1; }
  cmake --build "$dir" -j "$(nproc)" --target "$@" > "$OUT/t/$log.log" 2>&1 \
    || { grep -E error -A5 "$OUT/t/$log.log" | head -40; return 1; }
}
build_gpu() {
  configure_and_build build-gpu build "$@" || return 1
  echo "built at $((SECONDS - start)) s"
}
build_base() {
  local patch=$1; shift
  patch -s -R -p1 < "$patch" || { echo "build_base: $patch does not come off the tree"; return 1; }
  configure_and_build build-base build-base "$@"
  local rc=$?
  patch -s -p1 < "$patch" || { echo "build_base: $patch does not go back on"; return 1; }
  (( rc == 0 )) || return 1
  echo "base built at $((SECONDS - start)) s"
}
run_test() {
  echo "=== $1 ${2:-} ${3:-}" >> "$OUT/t/gpu-tests.log"
  env ${2:-STEADYMOE_UNSET=1} timeout 150 "build-gpu/tests/$1" ${3:+--gtest_filter=$3} \
    >> "$OUT/t/gpu-tests.log" 2>&1
  echo "$1 ${2:-} ${3:-}: rc=$? $(grep -c '^\[       OK' "$OUT/t/gpu-tests.log") OK so far"
}
memcheck() {
  local san
  san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  timeout 100 $san --tool memcheck "build-gpu/tests/$1" ${2:+--gtest_filter=$2} \
    > "$OUT/t/memcheck-$1.log" 2>&1
  echo "memcheck on $1 ${2:-}: rc=$? $(grep -h 'ERROR SUMMARY' "$OUT/t/memcheck-$1.log" | tail -1)"
}
tests_passed() {
  grep -q "rc=[1-9]" "$1" || return 0
  echo "a test failed: no timing"
  grep -h "FAILED\|Failure" "$OUT/t/gpu-tests.log" | head -20
  (cd "$OUT" && tar czf t.tgz t && rm -rf t)
  return 1
}
