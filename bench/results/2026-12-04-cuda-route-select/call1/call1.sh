#!/usr/bin/env bash
# Call 1 (session 25) at $1 (next/first-stage: main + decode CTAs asking for their first stage before the rest of
# their ring, STEADYMOE_FIRST_STAGES=N, default 1, 0 = the whole ring at once as main). Tests under the lead's
# values, memcheck; deepseek-v4-flash at 1 and 8 tokens in alternating triples (1, 0, 2); qwen3 at 1 token both;
# then a traced build (the per-CTA trace patch on this branch) at one token, leads 1 and 0.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 15 --target steadymoe_cli test_cuda_grouped_gemm test_cuda_layer > $OUT/t/build.log 2>&1 \
  || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
# The traced build, beside the tests (CPU only while they run the GPU).
( mkdir -p /tmp/tr && tar --exclude=./build-gpu --exclude=./.git -cf - . | tar -xf - -C /tmp/tr && cd /tmp/tr \
  && patch -p1 -s < bench/tmp-call/s25/trace-on-first.patch \
  && cmake -S . -B build-tr -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-tr.log 2>&1 \
  && cmake --build build-tr -j 12 --target steadymoe_cli > $OUT/t/build-tr.log 2>&1; echo "traced build rc=$? at $((SECONDS-start)) s" ) &
tr_pid=$!
source bench/device_tests.sh
run_test test_cuda_grouped_gemm
run_test test_cuda_grouped_gemm STEADYMOE_FIRST_STAGES=0
run_test test_cuda_grouped_gemm STEADYMOE_FIRST_STAGES=2 '*Fp4MeetingE4m3*:*Decode*:*FewRow*'
run_test test_cuda_grouped_gemm STEADYMOE_FIRST_STAGES=9 '*Fp4MeetingE4m3*:*Decode*:*FewRow*'
run_test test_cuda_layer
run_test test_cuda_layer STEADYMOE_FIRST_STAGES=0
memcheck test_cuda_grouped_gemm '*Fp4MeetingE4m3*'
grep -E "^===|^\[  FAILED|Failure|Which is|Expected|skipped|SKIPPED" $OUT/t/gpu-tests.log | head -40
wait $tr_pid
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
source bench/bench_runs.sh
BENCH_BUDGET_S=440
v4=(--workload deepseek-v4-flash --format fp4 --tokens 1,8 --trace)
q3=(--workload qwen3-30b-a3b --format bf16 --tokens 1 --trace)
bench_run v4 - "${v4[@]}"; bench_run v4-ring STEADYMOE_FIRST_STAGES=0 "${v4[@]}"
bench_run v4-two STEADYMOE_FIRST_STAGES=2 "${v4[@]}"; bench_run v4-ring-again STEADYMOE_FIRST_STAGES=0 "${v4[@]}"
bench_run v4-two-again STEADYMOE_FIRST_STAGES=2 "${v4[@]}"; bench_run v4-again - "${v4[@]}"
bench_run qwen3 - "${q3[@]}"; bench_run qwen3-ring STEADYMOE_FIRST_STAGES=0 "${q3[@]}"
BENCH_BUDGET_S=540
if [[ -x /tmp/tr/build-tr/steadymoe ]]; then
  BENCH_CLI=/tmp/tr/build-tr/steadymoe bench_run v4-trace STEADYMOE_DECODE_TRACE=0 --workload deepseek-v4-flash --format fp4 --tokens 1 --trace
  BENCH_CLI=/tmp/tr/build-tr/steadymoe bench_run v4-trace-ring "STEADYMOE_DECODE_TRACE=0 STEADYMOE_FIRST_STAGES=0" --workload deepseek-v4-flash --format fp4 --tokens 1 --trace
fi
runs=(); for n in v4 v4-ring v4-two v4-again v4-ring-again v4-two-again qwen3 qwen3-ring; do
  [[ -f $OUT/t/$n.json ]] && runs+=("$n=$OUT/t/$n.json"); done
python3 bench/compare_runs.py "${runs[@]}" > $OUT/compare.md 2>&1
python3 bench/compare_traces.py "${runs[@]}" > $OUT/traces.md 2>&1
head -40 $OUT/compare.md
grep -E "^===|\[trace\] launch [01] |\[trace\]   (consumer|stage 0|CTA life|stage loop|other)" $OUT/bench.txt | head -60
cd $OUT && tar czf t.tgz t && rm -rf t
