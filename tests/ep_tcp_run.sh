#!/usr/bin/env bash
# A torchrun-style launch — RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT in each process's
# environment — of `steadymoe run` writes the one-process file byte for byte. With one rank never
# started, the others stop within --ep-timeout, naming it, and no output file is written.
# usage: ep_tcp_run.sh STEADYMOE GOLDEN_DIR SCRATCH RANKS PLACEMENT
set -euo pipefail
cli=$1 golden=$2 scratch=$3 ranks=$4 placement=$5
mkdir -p "$scratch"
rm -f "$scratch"/*.safetensors "$scratch"/*.log
source "$(dirname "$0")/ep_run_common.sh"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 40000))
}

# Starts ranks FIRST..LAST of WORLD ranks; waits; prints how many failed.
launch() {
  local world=$1 first=$2 last=$3 port=$4 out=$5 timeout=$6 pids=() failed=0
  for r in $(seq "$first" "$last"); do
    RANK=$r WORLD_SIZE=$world LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      "$cli" "${args[@]}" --placement "$spec" --ep-timeout "$timeout" --output "$out" >"$scratch/rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  echo "$failed"
}

# A free port may be taken by another process between free_port and rank 0's listen (parallel tests open
# connections from the same range): then rank 0 says so and the launch is tried again on another port.
port_taken() { grep -q "Address already in use" "$scratch/rank0.log"; }

for attempt in 1 2 3; do
  failed=$(launch "$ranks" 0 $((ranks - 1)) "$(free_port)" "$scratch/ep.safetensors" 60)
  [[ $failed != 0 ]] && port_taken || break
done
if [[ $failed != 0 ]]; then cat "$scratch"/rank*.log; exit 1; fi
cmp "$scratch/one.safetensors" "$scratch/ep.safetensors"
echo "identical: $ranks ranks over TCP, $placement placement"

# The last rank never starts.
for attempt in 1 2 3; do
  start=$(date +%s)
  failed=$(launch "$ranks" 0 $((ranks - 2)) "$(free_port)" "$scratch/missing.safetensors" 2)
  elapsed=$(( $(date +%s) - start ))
  port_taken || break
done
[[ $failed == $((ranks - 1)) ]] || { echo "expected every started rank to fail, $failed did"; cat "$scratch"/rank*.log; exit 1; }
grep -q "rank(s) $((ranks - 1)) did not join" "$scratch/rank0.log" || { echo "rank 0 did not name the missing rank"; cat "$scratch/rank0.log"; exit 1; }
[[ ! -e $scratch/missing.safetensors ]] || { echo "an output file was written"; exit 1; }
(( elapsed < 30 )) || { echo "took ${elapsed}s"; exit 1; }
echo "missing rank $((ranks - 1)) named by rank 0 within ${elapsed}s: $(grep -h error "$scratch/rank0.log" | head -1)"
