#!/usr/bin/env python3
"""The data-parallel peer: PyTorch's DistributedDataParallel training a TorchScript model
over Gloo on CPUs, run as its users run it, under torchrun (torchrun's default of one
thread per process; DDP's default buckets, all-reduced during the backward pass).

Each rank trains `--batch / world` samples of every mini-batch, taken in order from the
data file (wrapping around), with SGD (momentum 0.9, as pipetrain's `--optimizer sgd`)
and mean cross-entropy. Rank 0 prints one JSON line, as pipelining_peer.py does:
samples/s over every step (barrier to barrier) and each rank's peak RSS.

    torchrun --nproc-per-node 2 ddp_peer.py --model-file mlp.pt --data-file mlp.data.pt --batch 256 --steps 30
"""
import argparse
import datetime
import json
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-file", required=True)
    p.add_argument("--data-file", required=True)
    p.add_argument("--batch", type=int, required=True, help="samples per mini-batch, all ranks together")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=300, help="seconds a collective may wait")
    a = p.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch % world:
        raise SystemExit(f"--batch {a.batch} does not split evenly over {world} ranks")
    model = nn.parallel.DistributedDataParallel(torch.jit.load(a.model_file))
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    data = torch.load(a.data_file)
    batches = data["inputs"].size(0) // a.batch
    if batches == 0:
        raise SystemExit(f"{a.data_file}: fewer samples than one mini-batch of {a.batch}")
    local = a.batch // world

    dist.barrier()
    start = time.perf_counter()
    for step in range(a.steps):
        first = (step % batches) * a.batch + rank * local
        x, y = data["inputs"][first:first + local], data["labels"][first:first + local]
        optimizer.zero_grad(set_to_none=True)
        out = model(x)
        F.cross_entropy(out.reshape(-1, out.size(-1)), y.reshape(-1)).backward()
        optimizer.step()
    dist.barrier()
    seconds = time.perf_counter() - start

    rss = [None] * world
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    if rank == 0:
        print(json.dumps({"schedule": "DDP", "world_size": world, "samples_per_second": a.steps * a.batch / seconds,
                          "seconds": seconds, "peak_rss_bytes": rss}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
