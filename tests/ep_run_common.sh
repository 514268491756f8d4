# Sourced by ep_mpi_run.sh and ep_tcp_run.sh: the one-process reference file of the deepseek-v3-tiny
# golden's layer 1, and the placement a run uses. Expects cli, golden, scratch, ranks and placement set.
model=$golden/deepseek-v3-tiny
args=(run --model "$model" --layer 1 --input "$model/io.safetensors:input" --input-dtype bf16 --backend cpu -q)
"$cli" "${args[@]}" --output "$scratch/one.safetensors" >/dev/null
spec=$placement
if [[ $placement == plan ]]; then  # skewed loads: the planner replicates the hot experts
  printf '[%s]' "$(seq -s, 1 16)" >"$scratch/load.json"
  "$cli" plan --load "$scratch/load.json" --ranks "$ranks" --physical $(( ((16 + ranks - 1) / ranks + 1) * ranks )) \
    --out "$scratch/placement.json" -q >/dev/null
  spec=$scratch/placement.json
fi
