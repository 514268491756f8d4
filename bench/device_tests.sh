# Sourced by a device call's script (after `start=$SECONDS`):
# - build_gpu TARGET... configures build-gpu (Release, Ninja) and builds the targets, logging to
#   $OUT/t/configure-build.log and $OUT/t/build.log; on a failure it prints the errors and returns 1 (the script then
#   stops: `build_gpu ... || exit 1`), else prints when the build was done. Where the call carries
#   build-carry-packed/ (bench/carry_build.sh: build-carry/ packed) with this tree's source stamp and the
#   targets' programs, and they start on this machine, it unpacks and takes those in place of building
#   (build-gpu then links to build-carry) and says so;
# - build_base PATCH TARGET... builds the targets in build-base from the tree with PATCH (a `git diff OLD NEW`
#   of the call's tree, saved beside the script) taken back, then puts the tree back: the older build to run
#   beside this one on the same machine (bench_runs.sh's BENCH_CLI); logs $OUT/t/build-base.log;
# with build-gpu built:
# - run_test BINARY [KNOB] [FILTER] runs build-gpu/tests/BINARY (its tests matching FILTER, if given) under
#   the environment KNOB sets (NAME=VALUE, several separated by spaces; none if empty), appending what it
#   prints to $OUT/t/gpu-tests.log under a line naming the run, and prints its exit status and the passed
#   tests so far;
# - program_of TARGET prints where a target's program lies in a build folder (the CLI and the tests);
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
program_of() {
  case $1 in
    steadymoe_cli) echo steadymoe ;;
    test_cli) return 1 ;;  # runs the CLI by the path it was built with
    test_*) echo "tests/$1" ;;
    *) return 1 ;;
  esac
}
# Whether build-carry/ holds this tree's build of every target, each starting here; says why not where it was
# carried and does not serve. A carried build-carry-packed/ is unpacked first, replacing build-carry/ where
# its stamp is this tree's (a machine kept warm may hold an earlier call's).
carried_build_serves() {
  local stamp
  stamp=$(bash bench/source_stamp.sh)
  if [[ -f build-carry-packed/programs.tar.xz ]]; then
    rm -rf build-carry-unpacked && mkdir build-carry-unpacked
    local unpacked=""
    if tar xJf build-carry-packed/programs.tar.xz -C build-carry-unpacked; then
      unpacked=$(cat build-carry-unpacked/build-carry/source-stamp 2>/dev/null)
    else
      echo "build-carry-packed/ does not unpack"
    fi
    if [[ -n $unpacked && $unpacked == "$stamp" ]]; then
      rm -rf build-carry && mv build-carry-unpacked/build-carry build-carry
    elif [[ -n $unpacked ]]; then
      echo "build-carry-packed/ is another tree's build"
    fi
    rm -rf build-carry-unpacked
  fi
  [[ -d build-carry ]] || return 1
  [[ -f build-carry/source-stamp ]] || { echo "build-carry/ has no source stamp: building"; return 1; }
  [[ $(< build-carry/source-stamp) == "$stamp" ]] \
    || { echo "build-carry/ is another tree's build: building"; return 1; }
  local t p
  for t in "$@"; do
    p=$(program_of "$t") && [[ -x build-carry/$p ]] || { echo "build-carry/ lacks $t: building"; return 1; }
    if [[ $t == steadymoe_cli ]]; then build-carry/$p --version; else build-carry/$p --gtest_list_tests; fi \
      > /dev/null 2>&1 || { echo "build-carry/$p does not start here: building"; return 1; }
  done
}
build_gpu() {
  mkdir -p "$OUT/t"
  if carried_build_serves "$@"; then
    rm -rf build-gpu && ln -s build-carry build-gpu
    echo "carried build taken at $((SECONDS - start)) s"
    return 0
  fi
  [[ -L build-gpu ]] && rm build-gpu  # an earlier carried build's link: build here, not into build-carry/
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
