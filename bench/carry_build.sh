#!/usr/bin/env bash
# Builds TARGET... on this machine (Release; the CUDA code for sm_90a by the same nvcc as a device machine's,
# the CPU code for x86-64-v3 in place of this machine's own instruction set, which the device's CPU may lack)
# and puts their programs in build-carry/ (git-ignored) beside the tree's source stamp, for a device call to
# carry (`carry: ["build-carry"]`) in place of building there: build_gpu (device_tests.sh) takes them where
# the stamp matches and they start on that machine, and builds as before otherwise. A device call's first
# build took 73-103 s (2026-12-06).
# usage: bench/carry_build.sh TARGET...   (the build itself in CARRY_BUILD_DIR, /tmp/steadymoe-carry-build
# unless set; programs and stamp together must stay under the 64 MiB a call carries)
set -euo pipefail
cd "$(dirname "$0")/.."
(( $# > 0 )) || { echo "usage: bench/carry_build.sh TARGET..." >&2; exit 2; }
source bench/device_tests.sh
for t in "$@"; do
  program_of "$t" > /dev/null || { echo "carry_build: $t is not a program a call can carry" >&2; exit 2; }
done
dir=${CARRY_BUILD_DIR:-/tmp/steadymoe-carry-build}
stamp=$(bash bench/source_stamp.sh)
rm -f "$dir/CMakeCache.txt"  # every option from the line below, none left from an earlier configure
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTEADYMOE_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 > /dev/null
cmake --build "$dir" -j "$(nproc)" --target "$@"
[[ $(bash bench/source_stamp.sh) == "$stamp" ]] \
  || { echo "carry_build: the sources changed during the build" >&2; exit 1; }
rm -rf build-carry && mkdir -p build-carry/tests
for t in "$@"; do
  p=$(program_of "$t")
  cp "$dir/$p" "build-carry/$p"
done
echo "$stamp" > build-carry/source-stamp
size=$(du -sm build-carry | cut -f1)
echo "build-carry/: $* ($size MiB), stamp $stamp"
(( size < 64 )) || { echo "carry_build: $size MiB is more than a call carries" >&2; exit 1; }
