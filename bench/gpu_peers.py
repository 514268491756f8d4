#!/usr/bin/env python3
"""Peers and floors for `steadymoe bench --backend cuda`, run in the same device call.

Reads the bench's JSON records, and for each measures on the same GPU:
  - the dense GEMM rate (bf16, and fp8 e4m3 when available): the compute floor's denominator;
  - torch._grouped_mm (bf16) doing the routed experts' work with the same tokens per expert
    (gate/up GEMM, SwiGLU, down GEMM);
then prints one markdown table per record and writes the merged records as JSON.

usage: gpu_peers.py OUT.json RECORD.json [RECORD.json ...]
"""
import json
import sys
import functools
print = functools.partial(print, flush=True)

import torch
import torch.nn.functional as F


def cuda_time_us(fn, repeat=20, before=None):
    """Median µs of `fn` between CUDA events, after one warm-up; `before` runs ahead of each timed call."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        if before:
            before()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def dense_rates(n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16 = 2 * n**3 / (cuda_time_us(lambda: a @ b) * 1e-6)
    fp8 = None
    try:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        fp8 = 2 * n**3 / (cuda_time_us(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16)) * 1e-6)
    except Exception as e:  # an fp8 GEMM is not available on every build
        print(f"fp8 dense GEMM unavailable: {e}")
    return bf16, fp8


def grouped_mm_us(load, hidden, inter):
    experts = len(load)
    rows = sum(load)
    if rows == 0:
        return None
    w13 = torch.randn(experts, 2 * inter, hidden, device="cuda", dtype=torch.bfloat16).mul_(0.02)
    w2 = torch.randn(experts, hidden, inter, device="cuda", dtype=torch.bfloat16).mul_(0.02)
    x = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(load, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)

    def run():
        h = torch._grouped_mm(x, w13.transpose(-2, -1), offs=offs)
        g, u = h[:, :inter], h[:, inter:]
        m = (F.silu(g) * u).contiguous()
        return torch._grouped_mm(m, w2.transpose(-2, -1), offs=offs)

    us = cuda_time_us(run)
    del w13, w2, x
    torch.cuda.empty_cache()
    return us


def main():
    out_path, records = sys.argv[1], sys.argv[2:]
    bf16_rate, fp8_rate = dense_rates()
    print(f"dense GEMM 8192^3: bf16 {bf16_rate * 1e-12:.0f} TFLOP/s"
          + (f", fp8 {fp8_rate * 1e-12:.0f} TFLOP/s" if fp8_rate else ""))
    merged = []
    for path in records:
        rec = json.load(open(path))
        wl = rec["workload"]
        H, I = wl["hidden"], wl["intermediate"]
        fp8_consumed = wl["format"] in ("fp8", "fp4") and wl["activations"] != "none"
        rate = fp8_rate if fp8_consumed and fp8_rate else bf16_rate
        rec["dense_gemm_flops_per_s"] = {"bf16": bf16_rate, "fp8": fp8_rate}
        print(f"\n### {wl['name']} — experts {wl['format']}, activations {wl['activations']}, {rec['device']}, "
              f"commit {rec['commit'][:12]}")
        print(f"copy bandwidth {rec['copy_bandwidth_bytes_per_s'] * 1e-9:.0f} GB/s (read + written); "
              f"compute floor at the dense {'fp8' if rate is fp8_rate else 'bf16'} rate {rate * 1e-12:.0f} TFLOP/s\n")
        print("| tokens | wall µs | layer µs | routed µs | memory floor µs | floor/routed | compute floor µs | "
              "routed TFLOP/s | of dense rate | torch._grouped_mm bf16 µs | grouped_mm/ours | rel err | bitwise |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for p in rec["points"]:
            compute_floor = p["routed_flops"] / rate * 1e6
            peer = grouped_mm_us(p["expert_load"], H, I)
            p["torch_grouped_mm_bf16_us"] = peer
            p["compute_floor_us"] = compute_floor
            tflops = p["routed_flops"] / (p["routed_us"] * 1e-6) * 1e-12
            bit = p.get("bitwise_equal_to_batch_of")
            print(f"| {p['tokens']} | {p['wall_us']:.1f} | {p['layer_us']:.1f} | {p['routed_us']:.1f} | {p['routed_floor_us']:.1f} | "
                  f"{p['routed_floor_us'] / p['routed_us']:.2f} | {compute_floor:.1f} | {tflops:.0f} | "
                  f"{tflops * 1e12 / rate:.2f} | {peer:.1f} | {peer / p['routed_us']:.2f} | "
                  f"{p['relative_error_vs_cpu_first_rows']:.2e} | "
                  f"{('yes' if bit['equal'] else 'NO') + ' (T=' + str(bit['tokens']) + ')' if bit else 'n/a'} |")
        merged.append(rec)
    json.dump(merged, open(out_path, "w"), indent=1)


if __name__ == "__main__":
    main()
