# The frame every device call's script shares, sourced first as `source bench/call_common.sh LABEL` (LABEL:
# the commit the records name, as the device copy's own git metadata may be stale):
# - sets -u, exports STEADYMOE_GOLDEN_DIR (the goldens beside the tree in .golden) and
#   STEADYMOE_SOURCE_COMMIT, starts the call's clock (`start`), makes $OUT/t and sources
#   bench/device_tests.sh and bench/bench_runs.sh;
# - call_tests FUNCTION runs FUNCTION (the call's build and tests: build_gpu, run_test, memcheck, ...) after a
#   line naming the GPU, into $OUT/tests.txt, prints that, and returns 1 where a test failed or FUNCTION
#   returned nonzero, as it does where its build fails (`build_gpu ... || return 1`; the script then stops:
#   `call_tests tests || exit 1`);
# - call_end prints every record's points (bench_points) and the call's time, and packs $OUT/t into t.tgz.
# Older scripts under bench/results spell this frame out: they are kept as they ran.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p "$OUT/t"
source bench/device_tests.sh
source bench/bench_runs.sh
call_tests() {
  {
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
    "$1" && echo "tests done at $((SECONDS - start)) s" || echo "$1 stopped (a build failed): rc=1"
  } > "$OUT/tests.txt" 2>&1
  cat "$OUT/tests.txt"
  tests_passed "$OUT/tests.txt"
}
call_end() {
  bench_points
  echo "call done at $((SECONDS - start)) s"
  (cd "$OUT" && tar czf t.tgz t && rm -rf t)
}
