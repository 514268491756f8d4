#!/usr/bin/env bash
# One entry point for a fresh machine: installs what the build needs (Debian packages), configures,
# builds, then runs the demo (`run`), the test suite (`test`) or just builds (`build`).
#   scripts/dev.sh run [steadymoe run options...]
#   scripts/dev.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STEADYMOE_BUILD_DIR:-build}
JOBS=${STEADYMOE_JOBS:-$(nproc)}

install_deps() {
    local pkgs=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libfmt-dev libgtest-dev libgmock-dev
                libopenblas-dev clang libclang-rt-dev libopenmpi-dev openmpi-bin)
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "installing: ${missing[*]}" >&2
        local sudo=""
        [[ $(id -u) -ne 0 ]] && sudo=sudo
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
}

build() {
    install_deps
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$BUILD_DIR" -j "$JOBS"
}

cmd=${1:-build}
shift || true
case "$cmd" in
    build) build ;;
    run) build && "$BUILD_DIR/steadymoe" run "$@" ;;
    test) build && ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" ;;
    *) echo "usage: scripts/dev.sh build|run|test" >&2; exit 2 ;;
esac
