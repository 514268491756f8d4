#!/usr/bin/env bash
# The row quantiser taking 16 values a lane and storing their codes as one 16-byte word, at $1, against the
# tree before it ($2, its CLI carried in build-base-carry/base.tar.gz). Tests: test_cuda_gathers (the
# quantiser against the group gather and the CPU), test_cuda_tensor_core, test_cuda_layer; memcheck on the
# gathers' quantiser tests. Bench, the two builds alternating twice: deepseek-v3 fp8 at 16384 tokens and
# deepseek-v4-flash fp4 at 1 and 16384; then a trace of deepseek-v3 each way (the quantiser's kernel times).
# Carried: bash bench/carry_build.sh steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
mkdir -p $OUT/t
source bench/device_tests.sh
( cd build-base-carry && tar xzf base.tar.gz )
{
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
build_gpu steadymoe_cli test_cuda_gathers test_cuda_tensor_core test_cuda_layer || exit 1
run_test test_cuda_gathers
run_test test_cuda_tensor_core
run_test test_cuda_layer
memcheck test_cuda_gathers "*Quantis*"
echo "tests done at $((SECONDS-start)) s"
} > $OUT/tests.txt 2>&1
cat $OUT/tests.txt
tests_passed $OUT/tests.txt || exit 1
source bench/bench_runs.sh
BENCH_BUDGET_S=${BUDGET:-300}
for r in 1 2; do
  for wl in deepseek-v3:fp8:16384 deepseek-v4-flash:fp4:1,16384; do
    IFS=: read -r w f t <<< "$wl"
    n=${w#deepseek-}
    bench_run $n-new-$r - --workload $w --format $f --tokens $t
    BENCH_CLI=./build-base-carry/steadymoe bench_run $n-base-$r - --workload $w --format $f --tokens $t
  done
done
bench_points
for way in new base; do
  cli=./build-gpu/steadymoe; [[ $way == base ]] && cli=./build-base-carry/steadymoe
  $cli bench --backend cuda --workload deepseek-v3 --format fp8 --tokens 16384 --trace > $OUT/trace-v3-$way.txt 2>&1
  echo "== $way"; grep -E "quantise_rows|first start" $OUT/trace-v3-$way.txt
done
echo "call done at $((SECONDS - start)) s"
cd $OUT && tar czf t.tgz t && rm -rf t
