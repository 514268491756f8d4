#!/usr/bin/env bash
# The README's H200 figures at $1 (bench/readme_figures.sh, two rounds), carried
# (`bash bench/carry_build.sh steadymoe_cli`); on any other GPU it stops at once, as the README's table is an
# H200's.
nvidia-smi --query-gpu=name --format=csv,noheader | tee /dev/stderr | grep -q H200 || { echo "not an H200: nothing run"; exit 0; }
RUNS=2 BENCH_BUDGET_S=400 bash bench/readme_figures.sh "$1"
