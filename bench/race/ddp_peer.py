#!/usr/bin/env python3
"""The data-parallel peer: PyTorch's DistributedDataParallel training the eager model over
Gloo on CPUs, under torchrun (torchrun's default of one thread per process), with DDP's
documented best settings: gradients as views of the buckets (`gradient_as_bucket_view`),
a static graph (`static_graph`), and `--bucket-mb` MiB buckets, all-reduced during the
backward pass.

The model is the one pipetrain trains, as race_models.py wrote it to `--dir`, whole and
eager, trained on the output its users train on (a Hugging Face model's logits). Each
rank trains `--batch / world` samples of every mini-batch, taken in order from the data
file (wrapping around), with SGD (momentum 0.9, as pipetrain's `--optimizer sgd`) and
mean cross-entropy, `--warmup-steps` untimed and then `--steps` timed. Rank 0 prints one
JSON line, as pipelining_peer.py does: samples/s over the timed steps (barrier to
barrier) and each rank's peak RSS.

    torchrun --nproc-per-node 2 ddp_peer.py --model mlp --dir DIR --batch 256 --steps 30 --bucket-mb 25
"""
import argparse
import datetime
import json
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from race_models import MODELS, Whole, load, loss, pin_like_pipetrain


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a race model (race_models.py)")
    p.add_argument("--dir", required=True, help="where race_models.py wrote it")
    p.add_argument("--batch", type=int, required=True, help="samples per mini-batch, all ranks together")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=0, help="untimed steps first")
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb")
    p.add_argument("--hook", choices=["none", "bf16"], default="none",
                   help="bf16: torch's bf16_compress_hook, gradients all-reduced in bfloat16 (lossy: half the bytes)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=300, help="seconds a collective may wait")
    a = p.parse_args()
    placement = pin_like_pipetrain()  # before any thread starts: the ranks share cores as pipetrain's do

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch % world:
        raise SystemExit(f"--batch {a.batch} does not split evenly over {world} ranks")
    model = nn.parallel.DistributedDataParallel(Whole(load(a.model, a.dir), MODELS[a.model][1]),
                                                bucket_cap_mb=a.bucket_mb, gradient_as_bucket_view=True,
                                                static_graph=True)
    if a.hook == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
        model.register_comm_hook(None, bf16_compress_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    data = torch.load(f"{a.dir}/{a.model}.data.pt")
    batches = data["inputs"].size(0) // a.batch
    if batches == 0:
        raise SystemExit(f"{a.model}: fewer samples than one mini-batch of {a.batch}")
    local = a.batch // world

    def train(steps, offset):
        for step in range(offset, offset + steps):
            first = (step % batches) * a.batch + rank * local
            x, y = data["inputs"][first:first + local], data["labels"][first:first + local]
            optimizer.zero_grad(set_to_none=True)
            loss(model(x), y).backward()
            optimizer.step()

    train(a.warmup_steps, 0)  # DDP's static graph is learnt in the first step
    dist.barrier()
    start = time.perf_counter()
    train(a.steps, a.warmup_steps)
    dist.barrier()
    seconds = time.perf_counter() - start

    rss = [None] * world
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    placements = [None] * world
    dist.all_gather_object(placements, placement)
    if rank == 0:
        print(json.dumps({"schedule": "DDP", "world_size": world, "samples_per_second": a.steps * a.batch / seconds,
                          "seconds": seconds, "peak_rss_bytes": rss, "ranks_placed": placements}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
