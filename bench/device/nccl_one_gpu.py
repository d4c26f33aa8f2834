#!/usr/bin/env python3
"""Can NCCL join two processes that share one GPU? (docs/gpu.md, issue 79)

pipetrain's `--wire auto` sends ranks that share a GPU over Gloo through pinned host
memory, and `--wire nccl` refuses them, on the belief that NCCL does not pair two ranks
of one device. This asks NCCL itself, through the device's PyTorch: two processes, each
on cuda:0, open a NCCL process group eagerly (`device_id`), then time an all-reduce and
a send/receive at each size. Prints one JSON line: whether each rank got through, the
error it got if not (NCCL's own words), and the rates where it worked.

    nccl_one_gpu.py [--sizes 4M,64M] [--repeats 10] [--timeout 60]
"""
import argparse
import datetime
import json
import multiprocessing
import os
import socket
import time


def size_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def rank_main(rank, port, sizes, repeats, timeout, results):
    import torch
    import torch.distributed as dist
    report = {"rank": rank, "ok": False}
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        device = torch.device("cuda:0")
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=2, device_id=device,
                                timeout=datetime.timedelta(seconds=timeout))
        report["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        rates = []
        for size in sizes:
            x = torch.ones(size // 4, device=device)
            dist.all_reduce(x)  # warm-up: connects the pair
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(repeats):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            allreduce = (time.perf_counter() - start) / repeats
            if rank == 0:
                dist.send(x, 1)
            else:
                dist.recv(x, 0)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(repeats):
                if rank == 0:
                    dist.send(x, 1)
                else:
                    dist.recv(x, 0)
            torch.cuda.synchronize()
            p2p = (time.perf_counter() - start) / repeats
            rates.append({"bytes": size, "allreduce_seconds": allreduce, "allreduce_bus_gb_s": size / allreduce / 1e9,
                          "send_seconds": p2p, "send_gb_s": size / p2p / 1e9})
        report.update(ok=True, rates=rates)
        dist.destroy_process_group()
    except Exception as e:  # NCCL's refusal is the finding: keep its words
        report["error"] = f"{type(e).__name__}: {e}"[:1500]
    results.put(report)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="4M,64M")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--timeout", type=int, default=60, help="seconds before a rank is given up on")
    a = p.parse_args()
    sizes = [size_bytes(s) for s in a.sizes.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    ranks = [context.Process(target=rank_main, args=(r, port, sizes, a.repeats, a.timeout, results)) for r in range(2)]
    for r in ranks:
        r.start()
    reports = []
    deadline = time.time() + a.timeout + 30
    while len(reports) < 2 and time.time() < deadline:
        try:
            reports.append(results.get(timeout=1))
        except Exception:
            if not any(r.is_alive() for r in ranks) and results.empty():
                break
    for r in ranks:
        r.join(timeout=5)
        if r.is_alive():
            r.kill()
    missing = sorted({0, 1} - {x["rank"] for x in reports})
    for r in missing:
        reports.append({"rank": r, "ok": False, "error": "no report: hung or died (exit code %s)" % ranks[r].exitcode})
    print(json.dumps({"check": "nccl_two_processes_one_gpu", "works": all(x["ok"] for x in reports),
                      "ranks": sorted(reports, key=lambda x: x["rank"])}))


if __name__ == "__main__":
    main()
