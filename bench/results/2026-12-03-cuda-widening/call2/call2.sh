#!/usr/bin/env bash
# Session call 2: at $1 (5120d86: group 0's scale in one operation, the next block's loads while a block's MMAs
# run). The FP4 GPU tests; deepseek-v4-flash fp4 decode with this build and with 75f2beb (call 1's; from
# bench/tmp-call/prev.tar), same call. Then a diagnostic build, 75f2beb plus trace.patch (not on main): per-CTA
# timelines of decode launches (clock64 around each stage's full-barrier wait, the producer's issue times), at one
# and eight tokens, and at one token with the FP4 x e4m3 launches' k range cut in two (STEADYMOE_DIAG_KSPLIT=2,
# wrong results: timing only).
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t /tmp/prev /tmp/trace
{
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure.log 2>&1
cmake --build build-gpu -j 16 > $OUT/t/build.log 2>&1 || { grep -E error -A5 $OUT/t/build.log | head -40; exit 1; }
echo "built at $((SECONDS-start)) s"
build_cli() {  # build_cli DIR: the CLI of another tree, in the background
  ( cmake -S $1 -B $1/b -G Ninja -DCMAKE_BUILD_TYPE=Release > $OUT/t/configure-$(basename $1).log 2>&1 &&
    cmake --build $1/b --target steadymoe_cli -j 7 > $OUT/t/build-$(basename $1).log 2>&1; echo "$(basename $1) CLI: rc=$?" > $OUT/t/built-$(basename $1).txt ) &
}
tar -xf bench/tmp-call/prev.tar -C /tmp/prev; build_cli /tmp/prev; prev_pid=$!
tar -xf bench/tmp-call/prev.tar -C /tmp/trace && (cd /tmp/trace && git apply $OLDPWD/bench/tmp-call/s15/trace.patch) && echo "trace patch applied"
build_cli /tmp/trace; trace_pid=$!
for t in test_cuda_codecs test_cuda_grouped_gemm test_cuda_layer; do
  echo "=== $t" >> $OUT/t/gpu-tests.log
  timeout 150 build-gpu/tests/$t >> $OUT/t/gpu-tests.log 2>&1; rc=$?; echo "$t: rc=$rc"
done
grep -h "FP4 x e4m3 CTAs per SM\|relative error" $OUT/t/gpu-tests.log | sort | uniq -c
grep -E "^\[  FAILED|Failure|Which is|Expected" $OUT/t/gpu-tests.log | head -30
wait $prev_pid $trace_pid; cat $OUT/t/built-*.txt
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
source bench/bench_runs.sh
bench_other() {  # bench_other NAME DIR ENV ARGS...: bench_run with another tree's CLI
  local name=$1 dir=$2 knob=$3; shift 3
  if (( SECONDS - start >= BENCH_BUDGET_S )); then echo "($name skipped)" >> $OUT/bench.txt; return; fi
  echo "=== $name ($dir, $knob)" >> $OUT/bench.txt
  [[ $knob == - ]] && knob=STEADYMOE_UNSET=1
  env $knob timeout 120 $dir/b/steadymoe bench --backend cuda "$@" --json $OUT/t/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS - start)) s)" >> $OUT/bench.txt
}
BENCH_BUDGET_S=500
bench_run v4 - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_other v4-prev /tmp/prev - --workload deepseek-v4-flash --format fp4 --tokens 1,8,128,256
bench_other trace-1 /tmp/trace STEADYMOE_DECODE_TRACE=30 --workload deepseek-v4-flash --format fp4 --tokens 1
bench_other trace-8 /tmp/trace STEADYMOE_DECODE_TRACE=30 --workload deepseek-v4-flash --format fp4 --tokens 8
bench_other trace-1-ksplit2 /tmp/trace STEADYMOE_DIAG_KSPLIT=2 --workload deepseek-v4-flash --format fp4 --tokens 1
bench_other trace-1-ksplit2-traced /tmp/trace "STEADYMOE_DECODE_TRACE=30 STEADYMOE_DIAG_KSPLIT=2" --workload deepseek-v4-flash --format fp4 --tokens 1
cd $OUT && tar czf t.tgz t && rm -rf t
