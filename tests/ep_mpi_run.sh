#!/usr/bin/env bash
# `mpiexec -n N steadymoe run` writes the file one process writes, byte for byte.
# usage: ep_mpi_run.sh MPIEXEC STEADYMOE GOLDEN_DIR SCRATCH RANKS PLACEMENT [RANKS_PER_NODE]
set -euo pipefail
mpiexec=$1 cli=$2 golden=$3 scratch=$4 ranks=$5 placement=$6 per_node=${7:-0}
mkdir -p "$scratch"
source "$(dirname "$0")/ep_run_common.sh"
"$mpiexec" -n "$ranks" "$cli" "${args[@]}" --placement "$spec" --ranks-per-node "$per_node" --output "$scratch/ep.safetensors"
cmp "$scratch/one.safetensors" "$scratch/ep.safetensors"
echo "identical: $ranks ranks (nodes of ${per_node/#0/all}), $placement placement"
