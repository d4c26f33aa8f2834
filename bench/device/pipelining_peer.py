#!/usr/bin/env python3
"""The peer on one GPU: torch.distributed.pipelining training a GPT of the zoo's shape.

One process holds every stage (one GPU takes one NCCL rank, so the stages cannot be
processes of their own): ScheduleGPipe and Schedule1F1B run one stage over M
micro-batches (what `pipetrain train --nproc 1` runs), ScheduleInterleaved1F1B two
stages on the one rank. The model is the zoo's gpt written in PyTorch (same layers,
sizes and arithmetic, its own random weights), so tokens/s compare like for like.
Prints one JSON line per schedule; a schedule that fails prints its error instead.

    pipelining_peer.py --layers 12 --width 768 --heads 12 --context 1024 --batch 8
                       --microbatches 4 --steps 20 --warmup 5 --precision bf16
"""
import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from zoo_gpt import layers, loss_fn  # the script's own directory is on sys.path


def run(a, name, device):
    from torch.distributed import pipelining as pp
    torch.manual_seed(0)
    parts = layers(a)
    stages = 1 if name != "ScheduleInterleaved1F1B" else 2
    cut = [round(i * len(parts) / stages) for i in range(stages + 1)]
    modules = [nn.Sequential(*parts[cut[i]:cut[i + 1]]).to(device) for i in range(stages)]
    pipeline_stages = [pp.PipelineStage(m, i, stages, device) for i, m in enumerate(modules)]
    cls = getattr(pp, name)
    schedule = cls(pipeline_stages if stages > 1 else pipeline_stages[0], a.microbatches, loss_fn=loss_fn)
    params = [p for m in modules for p in m.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    tokens = torch.randint(0, a.vocab, (a.batch, a.context + 1), device=device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16")
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        optimizer.zero_grad()
        losses = []
        with autocast:
            schedule.step(x, target=y, losses=losses)
        optimizer.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"peer": "torch.distributed.pipelining", "schedule": name, "stages": stages,
            "microbatches": a.microbatches, "batch": a.batch, "precision": a.precision,
            "samples_per_second": a.steps * a.batch / seconds,
            "tokens_per_second": a.steps * a.batch * a.context / seconds,
            "parameters": sum(p.numel() for p in params),
            "final_loss": float(sum(l.item() for l in losses) / max(len(losses), 1)),
            "peak_gpu_memory_bytes": torch.cuda.max_memory_allocated()}


def main():
    p = argparse.ArgumentParser()
    for k, v in {"layers": 12, "width": 768, "heads": 12, "context": 1024, "vocab": 256, "batch": 8,
                 "microbatches": 4, "steps": 20, "warmup": 5}.items():
        p.add_argument("--" + k, type=int, default=v)
    p.add_argument("--precision", default="bf16")
    p.add_argument("--schedules", default="ScheduleGPipe,Schedule1F1B,ScheduleInterleaved1F1B")
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    for name in a.schedules.split(","):
        try:
            print(json.dumps(run(a, name, device)), flush=True)
        except Exception as e:  # the peer's own limits are part of the result
            print(json.dumps({"peer": "torch.distributed.pipelining", "schedule": name,
                              "error": f"{type(e).__name__}: {e}"[:400]}), flush=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
