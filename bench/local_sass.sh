#!/usr/bin/env bash
# A SASS listing of one CUDA source, compiled here for sm_90a with the library's device flags, without a GPU:
# for bench/sass_loops.py and bench/sass_mma_check.py, to compare two builds of a change before device time is
# spent on it. The disassembler is cuobjdump where the toolkit has it, else nvdisasm (PyPI's
# nvidia-cuda-nvdisasm: `pip install nvidia-cuda-nvdisasm` puts it under site-packages/nvidia/cu*/bin).
# usage: bench/local_sass.sh SOURCE.cu OUT.sass    (from the repository root)
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n 2,6p "$0"; exit 2; }
source_file=$1 out=$2
cubin=$(mktemp --suffix=.cubin)
trap 'rm -f "$cubin"' EXIT
# (the flags the build gives src/kernels/cuda's objects: CMakeLists.txt's steadymoe target)
nvcc -I include -I src -I src/kernels/cuda -O3 -DNDEBUG -arch=sm_90a --fmad=false -std=c++20 -cubin \
    -o "$cubin" "$source_file"
if command -v cuobjdump >/dev/null 2>&1; then
    cuobjdump -sass "$cubin" >"$out"
else
    disasm=$(command -v nvdisasm || python3 - <<'EOF'
import glob, site, sys
for root in site.getsitepackages() + [site.getusersitepackages()]:
    for path in glob.glob(root + "/nvidia/cu*/bin/nvdisasm"):
        print(path)
        sys.exit(0)
sys.exit("no cuobjdump or nvdisasm: pip install nvidia-cuda-nvdisasm")
EOF
)
    "$disasm" -c "$cubin" >"$out"
fi
echo "$out: $(grep -cE '/\*[0-9a-f]{4,}\*/' "$out") instructions"
