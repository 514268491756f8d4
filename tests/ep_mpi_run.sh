#!/usr/bin/env bash
# `mpiexec -n N steadymoe run` writes the file one process writes, byte for byte.
# usage: ep_mpi_run.sh MPIEXEC STEADYMOE GOLDEN_DIR SCRATCH RANKS PLACEMENT
set -euo pipefail
mpiexec=$1 cli=$2 golden=$3 scratch=$4 ranks=$5 placement=$6
mkdir -p "$scratch"
model=$golden/deepseek-v3-tiny
args=(run --model "$model" --layer 1 --input "$model/io.safetensors:input" --input-dtype bf16 --backend cpu -q)
"$cli" "${args[@]}" --output "$scratch/one.safetensors" >/dev/null
if [[ $placement == plan ]]; then  # skewed loads: the planner replicates the hot experts
  printf '[%s]' "$(seq -s, 1 16)" >"$scratch/load.json"
  "$cli" plan --load "$scratch/load.json" --ranks "$ranks" --physical $(( ((16 + ranks - 1) / ranks + 1) * ranks )) \
    --out "$scratch/placement.json" -q >/dev/null
fi
spec=$placement; [[ $placement == plan ]] && spec=$scratch/placement.json
"$mpiexec" -n "$ranks" "$cli" "${args[@]}" --placement "$spec" --output "$scratch/ep.safetensors"
cmp "$scratch/one.safetensors" "$scratch/ep.safetensors"
echo "identical: $ranks ranks, $placement placement"
