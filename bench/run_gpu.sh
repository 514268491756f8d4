#!/usr/bin/env bash
# One device call: build, run the GPU tests, then the GPU benchmarks beside their floors and peers.
# usage: bench/run_gpu.sh OUT_DIR [tests|bench|schedules|sanitize|profile|ncu|sass|ep|all] [workload:format ...]
# profile: GPU time per kernel of one bench run (16384 tokens, or BENCH_ARGS).
# sass: the sampled stalls per SASS instruction of one grouped-GEMM launch (NCU_SKIP picks which; NCU_KERNEL, a
# regex, picks the kernel: grouped_gemm_sm90 unless set, decode_kernel for the decode kernel's launches; with
# NCU_NAME_BASE=mangled it matches mangled names, e.g. WeightCodeE2ELb1ELi8ELi6E for the 8-token FP4 x e4m3 CTAs).
# schedules: prefill (4096 and 16384 tokens, or BENCH_ARGS) under each tiled-kernel schedule and row copy,
# one table of gate/up and down µs per workload (the same bits; see docs/cli.md). Each variant is a bench
# run of its own: deepseek-v3 spends about a minute setting up each.
# ep: the layer over every GPU of the machine (--ep-ranks) beside one GPU, and NCCL's all-to-all.
# BENCH_ARGS adds options to every bench command (e.g. "--tokens 1,256,16384").
set -uo pipefail
out=${1:?output directory}; what=${2:-all}; shift 2 || true
mkdir -p "$out"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -60; exit 1; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$out/device.txt"
# The tiled kernel's variants besides its defaults (the same bits; docs/cli.md): its schedules, rows by
# cp.async in place of tensor copies, persistent CTAs each on its own in place of pairs; and every kernel
# launched after the one before it has ended (no dependent launches); decode batches on the tiled kernel's
# 64-row CTAs in place of the decode kernel, in 128-row tiles in place of tiles as tall as the decode CTAs,
# FP4 x e4m3 decode CTAs of 16 tokens in place of 8, and 8-token ones four to an SM in place of six; the BF16,
# FP8 and 16-token FP4 x e4m3 decode shapes with fewer CTAs to an SM; persistent epilogues always from the
# consumers' registers, and always parked; the decode kernel's rows gathered first in place of read in place;
# the FP4 x e4m3 decode CTAs' token scales copied per stage in place of held; decode CTAs' weights copied only
# after the wait for the kernel before them, and early for FP8 weights too; the shared expert after the routed
# experts on the layer's stream; activations quantised a warp per 128 values
# in place of by the row kernel, and tokens quantised once and their codes copied in place of quantised
# straight into their pairs' rows.
variants=(STEADYMOE_TILED_SCHEDULE={per-tile,two-per-sm,persistent} STEADYMOE_ROW_TENSOR_COPIES=0 STEADYMOE_PAIRED_CTAS=0
          STEADYMOE_DEPENDENT_LAUNCHES=0 STEADYMOE_DECODE_KERNEL=tiled STEADYMOE_DECODE_TILES=full STEADYMOE_FP4_THIN_CTAS=0
          STEADYMOE_FP4_THIN_CTAS_PER_SM=4 STEADYMOE_DECODE_CTAS_PER_SM=fewer STEADYMOE_PARKED_EPILOGUES={0,1}
          STEADYMOE_INDEXED_ROWS=0 STEADYMOE_HELD_TOKEN_SCALES=0 STEADYMOE_EARLY_WEIGHTS={0,1}
          STEADYMOE_SHARED_FORK=after STEADYMOE_QUANTISE_ROWS=group
          STEADYMOE_QUANTISE_TO_PAIRS=0)
if [[ $what == tests || $what == all ]]; then
  for t in build-gpu/tests/test_cuda_* build-gpu/tests/test_cli; do
    [[ -x $t ]] || continue
    echo "=== $(basename "$t")" >>"$out/gpu-tests.log"
    timeout 120 "$t" >>"$out/gpu-tests.log" 2>&1; rc=$?
    echo "$(basename "$t"): rc=$rc"
  done
  # The sm_80 kernel on this GPU too.
  for t in test_cuda_tensor_core test_cuda_layer; do
    echo "=== $t (mma.sync kernel)" >>"$out/gpu-tests.log"
    STEADYMOE_GEMM_KERNEL=mma timeout 120 build-gpu/tests/$t >>"$out/gpu-tests.log" 2>&1; echo "$t with the mma.sync kernel: rc=$?"
  done
  # The tiled kernel's other schedules give the same bits. Each binary runs in under 20 s: a variant that hangs
  # (a pipeline deadlock) costs a minute of device time, not the call.
  for knob in "${variants[@]}"; do
    for t in test_cuda_grouped_gemm test_cuda_tensor_core test_cuda_layer; do
      echo "=== $t ($knob)" >>"$out/gpu-tests.log"
      env "$knob" timeout 60 build-gpu/tests/$t >>"$out/gpu-tests.log" 2>&1; echo "$t with $knob: rc=$?"
    done
  done
  grep -E "^===|^\[  (PASSED|FAILED) |Failure|relative|Expected|Which is|actual" "$out/gpu-tests.log" | head -150
fi
if [[ $what == sanitize || $what == all ]]; then
  # compute-sanitizer over the tensor-core path at small sizes, both GEMM kernels. racecheck reports the
  # GEMMs' stage protocol (copies into a stage against its consumers' loads, ordered through mbarriers, which it
  # does not follow) and the parked epilogues' hand-off (the epilogue warps' loads against the consumers'
  # stores, ordered through named barriers where the consumers arrive, which it does not follow either:
  # bench/results/2026-12-05-cuda-named-handoff.md, 2026-12-05-cuda-route-and-permute.md):
  # bench/racecheck_sass.py names each reported pair's instructions from cuobjdump -sass.
  san=/usr/local/cuda/bin/compute-sanitizer
  filter='Formats/CudaTensorCore.MatchesTheCpuBackendWithinRounding/*'
  for run in memcheck:wgmma racecheck:wgmma initcheck:wgmma memcheck:mma; do
    tool=${run%%:*}; kernel=${run#*:}
    {
      STEADYMOE_GEMM_KERNEL=$kernel timeout 60 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_tensor_core \
        --gtest_filter="$filter" >"$out/sanitize-$tool-$kernel.log" 2>&1
      echo "compute-sanitizer $tool ($kernel kernel): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/sanitize-$tool-$kernel.log" | tr '\n' ' ')"
    }
  done
  # The layer's element-wise stages: the chunked permutation, the combine, the gathers and bf16 epilogues.
  for tool in memcheck racecheck initcheck; do
    for run in "test_cuda_permutation:*" "test_cuda_combine:*" \
               "test_cuda_gathers:*" "test_cuda_grouped_gemm:CudaGroupedGemm.Bf16Epilogues*"; do
      t=${run%%:*}; filter=${run#*:}
      timeout 120 $san --tool $tool --error-exitcode 3 build-gpu/tests/$t --gtest_filter="$filter" >"$out/sanitize-$tool-$t.log" 2>&1
      echo "compute-sanitizer $tool ($t): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/sanitize-$tool-$t.log" | tr '\n' ' ')"
    done
  done
  # The few-row kernels (the decode kernel in each of its shapes; 64-row CTAs with STEADYMOE_DECODE_KERNEL=tiled)
  # on their own.
  for tool in memcheck racecheck initcheck; do
    timeout 120 $san --tool $tool --error-exitcode 3 build-gpu/tests/test_cuda_grouped_gemm \
      --gtest_filter='CudaGroupedGemm.FewRowCtas*:CudaGroupedGemm.Fp4Decode*:CudaGroupedGemm.Fp4MeetingE4m3*:CudaGroupedGemm.IndexedRows*' \
      >"$out/sanitize-$tool-few-rows.log" 2>&1
    echo "compute-sanitizer $tool (few-row kernels): rc=$? $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$out/sanitize-$tool-few-rows.log" | tr '\n' ' ')"
  done
fi
if [[ $what == profile ]]; then
  # GPU time per kernel (the profiler's duration metric only: one pass per launch, clocks left alone; it
  # serialises launches and flushes caches between them, so the times are each kernel's own, cold).
  for spec in "$@"; do
    wl=${spec%%:*}; fmt=${spec#*:}
    /usr/local/cuda/bin/ncu --clock-control none --csv --metrics gpu__time_duration.sum ./build-gpu/steadymoe bench \
      --backend cuda --workload "$wl" --format "$fmt" ${BENCH_ARGS:---tokens 16384 --repeat 1} \
      >"$out/kernels-$wl-$fmt.csv" 2>"$out/kernels-$wl-$fmt.err"
    echo "== $wl $fmt (rc=$?)" | tee -a "$out/kernels.txt"
    python3 bench/kernel_times.py "$out/kernels-$wl-$fmt.csv" | tee -a "$out/kernels.txt"
  done
  ( cd "$out" && tar czf kernels-raw.tgz --remove-files ./kernels-*.csv ./kernels-*.err 2>/dev/null ) || true
fi
if [[ $what == ncu ]]; then
  # Per-kernel hardware counters (cold caches, as a decode layer meets them; clocks not locked), one
  # line per kernel: time, DRAM throughput, and the warps' main stall reasons.
  for spec in "$@"; do
    wl=${spec%%:*}; fmt=${spec#*:}
    /usr/local/cuda/bin/ncu --clock-control none --csv --page details --kernel-name "regex:${NCU_KERNELS:-.}" \
      --launch-count "${NCU_COUNT:-40}" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section LaunchStats --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" ./build-gpu/steadymoe bench --backend cuda --workload "$wl" --format "$fmt" \
      ${BENCH_ARGS:---tokens 1 --repeat 1} >"$out/ncu-$wl.csv" 2>"$out/ncu-$wl.err"
    echo "== $wl $fmt (rc=$?)" | tee -a "$out/ncu.txt"
    python3 bench/ncu_table.py "$out/ncu-$wl.csv" | tee -a "$out/ncu.txt"
  done
  ( cd "$out" && tar czf ncu-raw.tgz --remove-files ./ncu-*.csv ./ncu-*.err 2>/dev/null ) || true
fi
if [[ $what == sass ]]; then
  # Where the warps of one grouped-GEMM launch stall, per SASS instruction (the profiler's sampled stalls):
  # launch NCU_SKIP (default 1: the first routed GEMM after the router's) of one bench run at 16384 tokens.
  # (The decode kernel's launches, NCU_KERNEL=decode_kernel: in a decode batch the router's GEMM and the shared
  # expert's come before the routed experts'.)
  for spec in "$@"; do
    wl=${spec%%:*}; fmt=${spec#*:}
    /usr/local/cuda/bin/ncu --clock-control none --kernel-name-base "${NCU_NAME_BASE:-function}" \
      --kernel-name "regex:${NCU_KERNEL:-grouped_gemm_sm90}" --launch-skip "${NCU_SKIP:-1}" --launch-count 1 \
      --section SourceCounters --section WarpStateStats -f -o "$out/sass-$wl" ./build-gpu/steadymoe bench --backend cuda \
      --workload "$wl" --format "$fmt" ${BENCH_ARGS:---tokens 16384 --repeat 1} >"$out/sass-$wl.log" 2>&1
    /usr/local/cuda/bin/ncu --import "$out/sass-$wl.ncu-rep" --page source --print-source sass --csv >"$out/sass-$wl.csv" 2>>"$out/sass-$wl.log"
    echo "== $wl $fmt (rc=$?)" | tee -a "$out/sass.txt"
    python3 bench/sass_stalls.py "$out/sass-$wl.csv" | tee -a "$out/sass.txt"
  done
  ( cd "$out" && tar czf sass-raw.tgz --remove-files ./sass-*.csv ./sass-*.ncu-rep 2>/dev/null ) || true
fi
if [[ $what == bench || $what == all ]]; then
  records=()
  for spec in "$@"; do
    wl=${spec%%:*}; fmt=${spec#*:}
    json="$out/bench-$wl-$fmt.json"
    ./build-gpu/steadymoe bench --backend cuda --workload "$wl" --format "$fmt" ${BENCH_ARGS:-} --json "$json" 2>&1 | tee "$out/bench-$wl-$fmt.txt" | grep -v "^bench:" 
    [[ -f $json ]] && records+=("$json")
  done
  [[ ${#records[@]} -gt 0 ]] && python3 bench/gpu_peers.py "$out/peers.json" "${records[@]}" 2>&1 | tee "$out/peers.md"
fi
if [[ $what == schedules ]]; then
  for spec in "$@"; do
    wl=${spec%%:*}; fmt=${spec#*:}
    for variant in default "${variants[@]}"; do
      knob=(); [[ $variant != default ]] && knob=("$variant")
      name=${variant,,}; name=${name//[^a-z0-9-]/_}
      env "${knob[@]}" timeout 150 ./build-gpu/steadymoe bench --backend cuda --workload "$wl" --format "$fmt" \
        ${BENCH_ARGS:---tokens 4096,16384} --json "$out/schedule-$wl-$fmt-$name.json" >/dev/null 2>>"$out/schedule-$wl-$fmt.err"
      python3 bench/schedule_table.py "$out/schedule-$wl-$fmt-$name.json" "$wl $fmt $variant" 2>&1 | tee -a "$out/schedules.txt"
    done
  done
  ( cd "$out" && tar czf schedules-json.tgz --remove-files ./schedule-*.json ./schedule-*.err 2>/dev/null ) || true
fi
if [[ $what == ep ]]; then
  gpus=$(nvidia-smi --list-gpus | wc -l)
  for spec in "$@"; do
    wl=${spec%%:*}; fmt=${spec#*:}
    ./build-gpu/steadymoe bench --backend cuda --ep-ranks "$gpus" --workload "$wl" --format "$fmt" ${BENCH_ARGS:-} \
      --json "$out/ep-$wl-$fmt.json" 2>&1 | grep -v "^bench:" | tee -a "$out/ep.md"
  done
  python3 bench/gpu_ep_peers.py "$out/ep-nccl.json" 2>&1 | tee -a "$out/ep.md"
  ( cd "$out" && tar czf ep-json.tgz --remove-files ./ep-*.json 2>/dev/null ) || true
fi
# Few files come back from a remote call: pack the logs, keep the tables and JSONs beside them.
( cd "$out" && tar czf logs.tgz --remove-files ./*.log 2>/dev/null ) || true
