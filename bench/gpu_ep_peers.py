#!/usr/bin/env python3
"""NCCL baseline for the GPU expert-parallel dispatch/combine, run in the same device call.

Spawns one process per visible GPU (NCCL backend, rank r on cuda:r) and measures on rank 0:
  - torch.distributed.all_to_all_single, T rows split evenly over all ranks (itself included);
  - torch.distributed.all_to_all_single, T rows to each rank: an MoE dispatch in which every
    token row goes to every rank, input [world*T, H];
then, in the parent process, the peer copy cuda:0 -> cuda:1 (dst.copy_(src, non_blocking=True))
at 1, 16 and 256 MiB and at one T x H bf16 block per measured (T, H), so that small-transfer
latency is visible. These are the numbers our own dispatch/combine is compared against.

GB/s is 1e9 bytes per second. For the collectives, bytes are those one rank sends to OTHER ranks
(the part it keeps for itself is not counted); for the peer copy, the bytes copied.

usage: gpu_ep_peers.py OUT.json [--tokens 128,4096] [--hidden 7168,4096] [--repeat 20]
"""
import argparse, datetime, functools, json, os, socket, sys, tempfile
print = functools.partial(print, flush=True)

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpu_peers import cuda_time_us  # this directory is on the path when run as a script

BF16 = 2  # bytes per element


def collective_time_us(fn, rank, repeat=20, warmup=3):
    # Every rank runs the same loop (the collective needs them all); rank 0's times are reported.
    dist.barrier(device_ids=[rank])
    for _ in range(warmup):
        fn()
    return cuda_time_us(fn, repeat, before=lambda: (dist.barrier(device_ids=[rank]), torch.cuda.synchronize()))


def record(what, hidden, tokens, nbytes, us):
    return {"what": what, "hidden": hidden, "tokens_per_rank": tokens, "bytes": nbytes, "us": us,
            "gb_per_s": nbytes / us * 1e-3 if us > 0 else None}


def worker(rank, world, port, tokens, hiddens, repeat, result_path):
    records = []
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank), timeout=datetime.timedelta(minutes=5))
        for H in hiddens:
            for T in tokens:
                even = T - T % world  # equal splits need a multiple of the world size
                if even:
                    inp = torch.randn(even, H, device="cuda", dtype=torch.bfloat16)
                    out = torch.empty_like(inp)
                    us = collective_time_us(lambda: dist.all_to_all_single(out, inp), rank, repeat)
                    records.append(record("all_to_all_single, T rows split over all ranks", H, even,
                                          even // world * (world - 1) * H * BF16, us))
                inp = torch.randn(world * T, H, device="cuda", dtype=torch.bfloat16)
                out = torch.empty_like(inp)
                us = collective_time_us(lambda: dist.all_to_all_single(out, inp), rank, repeat)
                records.append(record("all_to_all_single, T rows to each rank", H, T, T * (world - 1) * H * BF16, us))
                del inp, out
                torch.cuda.empty_cache()
        if rank == 0:
            with open(result_path, "w") as f:
                json.dump(records, f)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def peer_copies(tokens, hiddens):
    peer = torch.cuda.can_device_access_peer(0, 1)
    if not peer:
        print("cuda:0 cannot access cuda:1 as a peer; the copies below go through the host")
    sizes = [("peer copy cuda:0 -> cuda:1", None, None, n << 20) for n in (1, 16, 256)]
    sizes += [("peer copy cuda:0 -> cuda:1, one T x H bf16 block", H, T, T * H * BF16) for H in hiddens for T in tokens]
    records = []
    with torch.cuda.device(0):
        for what, H, T, nbytes in sizes:
            src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:0").random_(0, 256)
            dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:1")
            us = cuda_time_us(lambda: dst.copy_(src, non_blocking=True), repeat=10)
            records.append(record(what, H, T, nbytes, us))
            del src, dst
    torch.cuda.empty_cache()
    return peer, records


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ints = lambda text: [int(x) for x in text.split(",") if x]
    ap.add_argument("--tokens", type=ints, default=[128, 4096], help="tokens per rank, comma-separated")
    ap.add_argument("--hidden", type=ints, default=[7168, 4096], help="hidden sizes, comma-separated")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()

    world = torch.cuda.device_count()
    if world < 2:
        msg = f"needs 2 GPUs, found {world}"
        print(msg)
        json.dump({"skipped": msg}, open(args.out, "w"), indent=1)
        return 0

    nccl = torch.cuda.nccl.version()
    result = {"torch": torch.__version__, "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl),
              "world_size": world, "devices": [torch.cuda.get_device_name(i) for i in range(world)],
              "gb_per_s_means": "1e9 bytes/s; collectives: bytes one rank sends to other ranks / time on rank 0; "
                                "peer copies: bytes copied / time on cuda:0",
              "repeat": args.repeat, "records": []}
    fd, tmp = tempfile.mkstemp(suffix=".json"); os.close(fd)
    try:
        mp.spawn(worker, args=(world, free_port(), args.tokens, args.hidden, args.repeat, tmp), nprocs=world, join=True)
        with open(tmp) as f:
            result["records"] += json.load(f)
    except Exception as e:  # keep going to the peer copies; the failure is recorded
        print(f"collective part failed: {e}")
        result["collective_error"] = str(e)
    finally:
        os.remove(tmp)

    try:
        result["peer_access"], copies = peer_copies(args.tokens, args.hidden)
        result["records"] += copies
    except Exception as e:
        print(f"peer copy part failed: {e}")
        result["peer_copy_error"] = str(e)

    print(f"\ntorch {result['torch']}, NCCL {result['nccl']}, {world} x {result['devices'][0]}, "
          f"peer access {result.get('peer_access')}; GB/s = {result['gb_per_s_means']}\n")
    print("| what | H | tokens per rank | bytes | µs | GB/s |")
    print("|---|---|---|---|---|---|")
    for r in result["records"]:
        print(f"| {r['what']} | {r['hidden'] or '-'} | {r['tokens_per_rank'] or '-'} | {r['bytes']} | "
              f"{r['us']:.1f} | {r['gb_per_s'] or 0:.1f} |")
    json.dump(result, open(args.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
