#!/usr/bin/env python3
"""An idiomatic PyTorch training loop for the zoo's gpt: the anchor that pipetrain's one
stage on one GPU is compared against (docs/gpu.md, "One stage against a plain loop").

Written the way a user writes it: an eager nn.Sequential with fp32 master weights, autocast
for bf16, fused AdamW, a new batch of random tokens each step drawn on the host and copied
through pinned memory. Optionally torch.compile and activation recomputation per block.
Warm-up steps are excluded from the timing. Prints one JSON line.

    torch_loop.py --layers 12 --width 768 --heads 12 --context 1024 --batch 8
                  --steps 100 --warmup 20 --precision bf16 [--compile] [--checkpoint]
    torch_loop.py --device cpu --layers 2 --width 64 --heads 2 --context 32 --batch 4 --steps 3
"""
import argparse
import json
import platform
import time

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from zoo_gpt import Block, layers, loss_fn  # the script's own directory is on sys.path


class Recompute(nn.Module):
    """Keeps only its block's input and recomputes the block's activations in the backward pass."""

    def __init__(self, block):
        super().__init__()
        self.block = block

    def forward(self, x):
        return checkpoint(self.block, x, use_reentrant=False)


def batches(a, device):
    """Yields (x, y) on the device, a new batch each step: random tokens drawn on the host, as
    pipetrain's synthetic dataset draws them, and copied asynchronously from pinned memory."""
    cuda = device.type == "cuda"
    # Two buffers alternate so the host fills one while the other's copy may be in flight; the
    # event says when a buffer's last copy is done, so it is never overwritten too early.
    buffers = [torch.empty((a.batch, a.context + 1), dtype=torch.long, pin_memory=cuda) for _ in range(2)]
    copied = [None, None]
    i = 0
    while True:
        if copied[i] is not None:
            copied[i].synchronize()
        buffers[i].random_(0, a.vocab)
        tokens = buffers[i].to(device, non_blocking=True)
        if cuda:
            copied[i] = torch.cuda.Event()
            copied[i].record()
        yield tokens[:, :-1], tokens[:, 1:]
        i = 1 - i


def main():
    p = argparse.ArgumentParser()
    for k, v in {"layers": 12, "width": 768, "heads": 12, "context": 1024, "vocab": 256, "batch": 8,
                 "steps": 100, "warmup": 20}.items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--checkpoint", action="store_true", help="recompute each block's activations")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM)")
    p.add_argument("--trace", help="write a Chrome trace (torch.profiler) of the last two steps here")
    a = p.parse_args()
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    torch.manual_seed(0)
    parts = [Recompute(m) if a.checkpoint and isinstance(m, Block) else m for m in layers(a)]
    model = nn.Sequential(*parts).to(device)  # fp32 master weights; autocast casts per op
    parameters = sum(p.numel() for p in model.parameters())
    # Without weight decay AdamW's update is Adam's, the same arithmetic as pipetrain's `adam`
    # (LibTorch Adam: betas 0.9/0.999, eps 1e-8, no weight decay).
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, fused=True)
    if a.compile:
        model = torch.compile(model)  # compiled during the warm-up steps, outside the timing
    data = batches(a, device)

    profiler = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            sync()
            start = time.perf_counter()
        if a.trace and step == a.warmup + a.steps - 2:  # inside the timed steps: they slow a little
            activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
            profiler = torch.profiler.profile(activities=activities)
            profiler.__enter__()
        x, y = next(data)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    sync()  # no loss.item() in the loop: it would make the host wait for the GPU every step
    seconds = time.perf_counter() - start
    if profiler:
        profiler.__exit__(None, None, None)
        profiler.export_chrome_trace(a.trace)

    tokens_per_second = a.steps * a.batch * a.context / seconds
    # 6N for the matrix products with the weights (forward + backward) and 12·L·T·d for
    # attention's score and value products, forward + backward, causal mask not discounted.
    flops_per_token = 6 * parameters + 12 * a.layers * a.context * a.width
    tflops = tokens_per_second * flops_per_token / 1e12
    print(json.dumps({
        "runner": "torch_loop", "layers": a.layers, "width": a.width, "heads": a.heads,
        "context": a.context, "vocab": a.vocab, "batch": a.batch, "precision": a.precision,
        "compile": a.compile, "checkpoint": a.checkpoint, "parameters": parameters, "steps": a.steps,
        "samples_per_second": a.steps * a.batch / seconds, "tokens_per_second": tokens_per_second,
        "seconds_per_step": seconds / a.steps, "flops_per_token": flops_per_token, "tflops": tflops,
        "mfu": tflops / a.peak_tflops, "final_loss": loss.item(),
        "peak_gpu_memory_bytes": torch.cuda.max_memory_allocated(device) if cuda else None,
        "device_name": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
