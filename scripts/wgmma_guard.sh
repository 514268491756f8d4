#!/usr/bin/env bash
# The CUDA compiler launcher (CMakeLists.txt): runs one compile and fails it where ptxas serialised a kernel's
# warpgroup MMAs. ptxas does that when it cannot prove an MMA's registers are left alone while it runs (an
# accumulator read in a branch it cannot tie to the wait, too few registers for the MMAs in flight), and says so
# only in a notice: the kernel still builds, runs and gives the right bits, each MMA waiting for the one before,
# at a fraction of the speed. A first form of the release before the fold (bench/results/2026-12-06-cuda-prefill-
# bounds.md) did that to 30 kernels, seen only by reading the compiler's output. usage: wgmma_guard.sh COMMAND...
output=$("$@" 2>&1)
status=$?
[[ -n $output ]] && printf '%s\n' "$output"
(( status == 0 )) || exit "$status"
if grep -q "wgmma.mma_async instructions are serialized" <<< "$output"; then
  echo "error: ptxas serialised warpgroup MMAs in the kernels its notices above name (each MMA waits for the one" \
       "before): keep every read of an MMA's accumulators in the branch that waits for it, and the MMAs in flight" \
       "within the registers the launch bounds allow" >&2
  exit 1
fi
