#!/usr/bin/env bash
# Session call 2: every GPU test at $1 (stage loop without divisions, two weight scales per fold), the
# benches, the sampled stalls per instruction of deepseek-v3's routed gate/up, and L2 traffic of qwen3's
# gate/up beside a dense bf16 matrix product's.
set -u
export STEADYMOE_GOLDEN_DIR=$PWD/.golden STEADYMOE_SOURCE_COMMIT=$1
start=$SECONDS
nv=/usr/local/cuda/bin
mkdir -p $OUT/b
timeout 240 bench/run_gpu.sh $OUT/t tests > $OUT/tests.txt 2>&1
echo "tests done at $((SECONDS-start)) s" >> $OUT/tests.txt
b=./build-gpu/steadymoe
run() {  # name, env..., then bench args after --
  local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
  echo "=== $name" >> $OUT/bench.txt
  env "${envs[@]}" timeout 150 $b bench --backend cuda "$@" --json $OUT/b/$name.json 2>&1 | grep -v "^\[bench" >> $OUT/bench.txt
  echo "($name done at $((SECONDS-start)) s)" >> $OUT/bench.txt
}
run v3 X=1 -- --workload deepseek-v3 --format fp8 --tokens 1,128,4096,16384
run q X=1 -- --workload qwen3-30b-a3b --format bf16 --tokens 1,8,128,256,4096,16384
run v4 X=1 -- --workload deepseek-v4-flash --format fp4 --tokens 8,16384
NCU_SKIP=3 timeout 120 bench/run_gpu.sh $OUT/s sass deepseek-v3:fp8 > $OUT/sass.txt 2>&1
echo "sass v3 done at $((SECONDS-start)) s" >> $OUT/sass.txt
m=gpu__time_duration.sum,lts__t_bytes.sum.per_second,lts__t_sectors_op_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum.per_second,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__cycles_elapsed.avg.per_second
timeout 80 $nv/ncu --clock-control none --csv --page details --kernel-name regex:grouped_gemm_sm90 --launch-skip 1 --launch-count 2 --metrics $m \
  $b bench --backend cuda --workload qwen3-30b-a3b --format bf16 --tokens 16384 --repeat 1 > $OUT/b/l2-qwen3.csv 2>&1
echo "l2 qwen3 rc=$? at $((SECONDS-start)) s" >> $OUT/sass.txt
timeout 60 $nv/ncu --clock-control none --csv --page details --launch-skip 3 --launch-count 1 --metrics $m \
  python3 -c "import torch; a=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); b=torch.randn(8192,8192,device='cuda',dtype=torch.bfloat16); [a@b for _ in range(5)]; torch.cuda.synchronize()" > $OUT/b/l2-dense.csv 2>&1
echo "l2 dense rc=$? at $((SECONDS-start)) s" >> $OUT/sass.txt
for f in l2-qwen3 l2-dense; do python3 bench/ncu_metrics.py $OUT/b/$f.csv >> $OUT/sass.txt 2>&1; done
rm -f $OUT/t/device.txt $OUT/s/device.txt
cd $OUT && tar czf b.tgz b t s && rm -rf b t s
