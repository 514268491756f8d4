#!/usr/bin/env bash
# Prints one hash of the files a build of this tree reads, the same here and in a device machine's copy of the
# tree (which has no git history): a carried build (bench/carry_build.sh) is taken only where it matches.
cd "$(dirname "$0")/.." || exit 1
find CMakeLists.txt include src tests tools scripts fuzz bench/probes -type f ! -name '*.pyc' -print0 \
  | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
