#!/usr/bin/env bash
# Builds TARGET... on this machine (Release; the CUDA code for sm_90a by the same nvcc as a device machine's,
# the CPU code for x86-64-v3 in place of this machine's own instruction set, which the device's CPU may lack)
# and puts their programs in build-carry/ (git-ignored) beside the tree's source stamp, packed into
# build-carry-packed/programs.tar.xz for a device call to carry (`carry: ["build-carry-packed"]`) in place of
# building there: build_gpu (device_tests.sh) unpacks it and takes the programs where the stamp matches and
# they start on that machine, and builds as before otherwise. A device call's first build took 73-103 s
# (2026-12-06). Packed, because the tree (20 MB), the goldens (14 MB) and three unpacked programs (44 MiB)
# are more than the 64 MiB a call carries; packed by xz, a program is 4-5 MB (by gzip 5-6.4).
# usage: bench/carry_build.sh TARGET...   (the build itself in CARRY_BUILD_DIR, /tmp/steadymoe-carry-build
# unless set)
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
rm -rf build-carry-packed && mkdir build-carry-packed
tar cJf build-carry-packed/programs.tar.xz build-carry
packed=$(du -sb build-carry-packed | cut -f1)
# A call carries the tree (tracked files and untracked ones git does not ignore, the goldens among them)
# beside it, 64 MiB in all; 4 MiB are left for other carried paths (a probe's programs). (Files git tracks
# but the tree has lost are not counted.)
tree=$({ git ls-files -z; git ls-files -z --others --exclude-standard; } | du -cb --files0-from=- 2>/dev/null |
  tail -1 | cut -f1 || true)
echo "build-carry-packed/programs.tar.xz: $* ($((packed >> 20)) MiB; the tree $((tree >> 20)) MiB)," \
  "stamp $stamp"
(( packed + tree < (60 << 20) )) || { echo "carry_build: with the tree, more than a call carries" >&2; exit 1; }
