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
barrier) and each rank's peak RSS; and where its step went: the timed steps' forward,
backward (with the all-reduce it overlaps, to its end) and optimizer step, then, untimed
after them, its backward pass without the all-reduce and one all-reduce of every
gradient alone.

With `--epochs E`, it trains to accuracy instead, as pipetrain's `--epochs E --max-steps
K` does: E "epochs" of `--steps` mini-batches, each epoch a fresh shuffle of the data,
and after each the test accuracy and loss of the data file's test split, measured by rank
0 outside the training time. It stops after the first epoch at `--target-accuracy`, and
prints the history: per epoch the samples trained, the seconds inside training steps and
the wall seconds since training began.

    torchrun --nproc-per-node 2 ddp_peer.py --model mlp --dir DIR --batch 256 --steps 30 --bucket-mb 25
    torchrun ... ddp_peer.py --model tv-vgg --dir DIR --batch 64 --steps 20 --epochs 12 --target-accuracy 0.8
"""
import argparse
import datetime
import json
import resource
import statistics
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
    p.add_argument("--epochs", type=int, default=0, help="train to accuracy: this many epochs of --steps mini-batches")
    p.add_argument("--target-accuracy", type=float, default=None, help="with --epochs: stop once the test reaches it")
    p.add_argument("--seed", type=int, default=0, help="with --epochs: the data order's")
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

    phases = {"forward": 0.0, "backward": 0.0, "step": 0.0}  # the timed steps', summed

    def train(steps, offset, timed=False):
        for step in range(offset, offset + steps):
            first = (step % batches) * a.batch + rank * local
            x, y = data["inputs"][first:first + local], data["labels"][first:first + local]
            optimizer.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            out = loss(model(x), y)
            t1 = time.perf_counter()
            out.backward()  # the all-reduce of each bucket overlaps it; its wait ends it
            t2 = time.perf_counter()
            optimizer.step()
            if timed:
                phases["forward"] += t1 - t0
                phases["backward"] += t2 - t1
                phases["step"] += time.perf_counter() - t2

    if a.epochs:
        return to_accuracy(a, model, optimizer, data, rank, world, placement)

    train(a.warmup_steps, 0)  # DDP's static graph is learnt in the first step
    dist.barrier()
    start = time.perf_counter()
    train(a.steps, a.warmup_steps, timed=True)
    dist.barrier()
    seconds = time.perf_counter() - start
    alone = apart(model, data, local, rank)

    rss = [None] * world
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    placements = [None] * world
    dist.all_gather_object(placements, placement)
    if rank == 0:
        print(json.dumps({"schedule": "DDP", "world_size": world, "samples_per_second": a.steps * a.batch / seconds,
                          "seconds": seconds, "peak_rss_bytes": rss, "ranks_placed": placements,
                          "phase_seconds": {k: v / a.steps for k, v in phases.items()}, **alone}), flush=True)
    dist.destroy_process_group()


def apart(model, data, local, rank, repeats=3):
    """After the timed steps, untimed by the race: rank 0's backward pass without DDP's
    all-reduce (`no_sync`), and one all-reduce of every gradient alone, each a median of
    `repeats` (seconds). With the timed phases they say what the all-reduce cost a step
    beyond the backward pass it overlaps."""
    x, y = data["inputs"][rank * local:(rank + 1) * local], data["labels"][rank * local:(rank + 1) * local]
    backward, allreduce = [], []
    for _ in range(repeats):
        with model.no_sync():
            out = loss(model(x), y)
            t = time.perf_counter()
            out.backward()
            backward.append(time.perf_counter() - t)
        grads = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(grads)
        allreduce.append(time.perf_counter() - t)
    return {"backward_without_allreduce_seconds": statistics.median(backward),
            "allreduce_alone_seconds": statistics.median(allreduce), "gradient_bytes": grads.numel() * 4}


def to_accuracy(a, model, optimizer, data, rank, world, placement):
    """--epochs: trains epoch by epoch, a fresh shuffle each, evaluating after each."""
    inputs, labels = data["inputs"], data["labels"]
    if a.epochs * a.steps * a.batch > 0 and inputs.size(0) < a.steps * a.batch:
        raise SystemExit(f"{a.model}: {inputs.size(0)} samples, fewer than an epoch of {a.steps} x {a.batch}")
    local = a.batch // world
    history, train_seconds, samples = [], 0.0, 0
    start = time.perf_counter()
    for epoch in range(a.epochs):
        order = torch.randperm(inputs.size(0), generator=torch.Generator().manual_seed(a.seed * 1000 + epoch))
        dist.barrier()
        began = time.perf_counter()
        for step in range(a.steps):
            mine = order[step * a.batch + rank * local:step * a.batch + (rank + 1) * local]
            optimizer.zero_grad(set_to_none=True)
            loss(model(inputs[mine]), labels[mine]).backward()
            optimizer.step()
        dist.barrier()
        train_seconds += time.perf_counter() - began
        samples += a.steps * a.batch
        verdict = torch.zeros(3)  # accuracy, loss, stop
        if rank == 0:
            verdict[:2] = torch.tensor(evaluate(model.module, data["test_inputs"], data["test_labels"]))
            verdict[2] = float(a.target_accuracy is not None and verdict[0].item() >= a.target_accuracy)
        dist.broadcast(verdict, 0)
        history.append({"epoch": epoch + 1, "samples": samples, "train_seconds": train_seconds,
                        "wall_seconds": time.perf_counter() - start, "test_accuracy": verdict[0].item(),
                        "test_loss": verdict[1].item()})
        if rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {verdict[0].item():.4f}, {train_seconds:.1f} s training",
                  flush=True)
        if verdict[2].item():
            break
    if rank == 0:
        print(json.dumps({"schedule": "DDP", "world_size": world, "history": history,
                          "samples_per_second": samples / train_seconds, "ranks_placed": [placement]}), flush=True)
    dist.destroy_process_group()


@torch.no_grad()
def evaluate(module, inputs, labels, batch=256):
    """Test accuracy and mean loss, in eval mode (dropout off), as pipetrain evaluates."""
    module.eval()
    correct, total = 0, 0.0
    for first in range(0, inputs.size(0), batch):
        out = module(inputs[first:first + batch])
        correct += (out.argmax(-1) == labels[first:first + batch]).sum().item()
        total += loss(out, labels[first:first + batch]).item() * out.size(0)
    module.train()
    return correct / inputs.size(0), total / inputs.size(0)


if __name__ == "__main__":
    main()
