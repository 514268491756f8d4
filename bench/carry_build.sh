#!/usr/bin/env bash
# Builds TARGET... on this machine (Release; the CUDA code for sm_90a, as a device machine builds it, by the
# same nvcc) and puts their programs in build-carry/ (git-ignored) beside the tree's source stamp, for a device
# call to carry (`carry: ["build-carry"]`) in place of building there: build_gpu (device_tests.sh) takes them
# where the stamp matches and they start on that machine, and builds as before otherwise. A device call's
# build of the CLI alone takes about 100 s of its time.
# usage: bench/carry_build.sh TARGET...   (the build itself in CARRY_BUILD_DIR, /tmp/steadymoe-carry-build
# unless set; programs and stamp together must stay under the 64 MiB a call carries)
set -euo pipefail
cd "$(dirname "$0")/.."
(( $# > 0 )) || { echo "usage: bench/carry_build.sh TARGET..." >&2; exit 2; }
source bench/device_tests.sh
dir=${CARRY_BUILD_DIR:-/tmp/steadymoe-carry-build}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$dir" -j "$(nproc)" --target "$@"
rm -rf build-carry && mkdir -p build-carry/tests
for t in "$@"; do
  p=$(program_of "$t") || { echo "carry_build: no program known for target $t" >&2; exit 2; }
  cp "$dir/$p" "build-carry/$p"
done
bash bench/source_stamp.sh > build-carry/source-stamp
size=$(du -sm build-carry | cut -f1)
echo "build-carry/: $* ($size MiB), stamp $(cat build-carry/source-stamp)"
(( size < 64 )) || { echo "carry_build: $size MiB is more than a call carries" >&2; exit 1; }
