#!/usr/bin/env python3
"""The peer a user would pick instead of pipetrain's data parallelism: PyTorch's
DistributedDataParallel (the pinned torch of .venv, Gloo, torch.set_num_threads(1) per
process, which Debian's OpenBLAS does not obey: bench/ddp_comparison.sh also runs it with
OPENBLAS_NUM_THREADS=1), training the same MLP as pipetrain's `mlp` model (input ->
`layers` x [Linear(width), ReLU] -> Linear(classes)) with SGD on random data at the same
global batch. Prints one line:
`samples/s <value>` over the timed steps (after warm-up).

Usage: ddp_peer.py --nproc 2 --input 1024 --layers 8 --width 1024 --batch 256 --steps 30
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def mlp(a):
    layers, width_in = [], a.input
    for _ in range(a.layers):
        layers += [nn.Linear(width_in, a.width), nn.ReLU()]
        width_in = a.width
    layers.append(nn.Linear(width_in, a.classes))
    return nn.Sequential(*layers)


def worker(rank, a, result):
    torch.set_num_threads(a.threads)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(a.port)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(mlp(a))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    local = a.batch // a.nproc
    gen = torch.Generator().manual_seed(rank)
    data = [(torch.randn(local, a.input, generator=gen), torch.randint(0, a.classes, (local,), generator=gen))
            for _ in range(8)]
    loss_fn = nn.CrossEntropyLoss()
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            start = time.perf_counter()
        x, y = data[step % len(data)]
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()  # DDP all-reduces gradient buckets during backward
        opt.step()
    dist.barrier()
    if rank == 0:
        result.put(a.steps * a.batch / (time.perf_counter() - start))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    for name, default in [("nproc", 2), ("input", 1024), ("layers", 8), ("width", 1024), ("classes", 10),
                          ("batch", 256), ("steps", 30), ("warmup", 3), ("threads", 1), ("port", 29617)]:
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, result)) for r in range(a.nproc)]
    for proc in procs:
        proc.start()
    value = result.get(timeout=600)
    for proc in procs:
        proc.join()
    print(f"samples/s {value:.1f}")


if __name__ == "__main__":
    main()
