#!/usr/bin/env python3
"""The peer: torch.distributed.pipelining training an eager model over Gloo on CPUs, run
as its users run it, under torchrun (one process per pipeline rank; torchrun's default
of one thread per process).

The model is the one pipetrain trains, as race_models.py wrote it to `--dir`, eager and
with the same weights. Its pieces (the embedding, each block, the head: modules of the
original model) are cut into stages at `--stage-bounds`, as torchtitan builds stages,
and pipetrain's stages hold the layers captured from the same pieces. A rank keeps only
its own stages' weights. Stages are placed as pipetrain places
them: one per rank (ScheduleGPipe, Schedule1F1B), looped (rank r holds r, r+p, ...;
ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble) or a V (rank r holds r and
2p-1-r; ScheduleZBVZeroBubble, ScheduleDualPipeV).

Trains `--warmup-steps` and then `--steps` mini-batches of `--microbatches` x
`--microbatch-size` samples, taken in order from the data file (wrapping around), with
SGD (momentum 0.9, as pipetrain's `--optimizer sgd`) and mean cross-entropy per
micro-batch (scaled by 1/M, as pipetrain does). Rank 0 prints one JSON line: samples/s
over the timed steps (barrier to barrier) and each rank's peak RSS. `--save-params FILE`
writes the trained weights under the model's own state_dict names. `--action-times` adds,
per rank, the mean seconds of its stages' forward and backward calls in the timed steps
and the share of the time outside them (the schedule, messages, the loss, the optimizer
step and waiting), to set beside pipetrain's per-action figures.

    torchrun --nproc-per-node 2 pipelining_peer.py --model mlp --dir DIR \
        --schedule Schedule1F1B --stage-bounds 0,4,9 --microbatches 8 --microbatch-size 32 --steps 30
"""
import argparse
import datetime
import json
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules

from race_models import load, loss, pieces, pin_like_pipetrain

V_SHAPED = {"ScheduleZBVZeroBubble", "ScheduleDualPipeV"}


def stages_of_rank(schedule, rank, world, stages):
    """The stage indices rank `rank` holds, placed as pipetrain places them."""
    if issubclass(getattr(schedules, schedule), schedules.PipelineScheduleSingle):
        if stages != world:
            raise SystemExit(f"{schedule} runs one stage per rank: {stages} stages on {world} ranks")
        return [rank]
    if schedule in V_SHAPED:
        if stages != 2 * world:
            raise SystemExit(f"{schedule} runs two stages per rank in a V: {stages} stages on {world} ranks")
        return [rank, 2 * world - 1 - rank]
    if stages % world:
        raise SystemExit(f"{schedule}: {stages} stages do not loop evenly over {world} ranks")
    return list(range(rank, stages, world))


def timed(call, into):
    """`call`, appending the seconds of each call to `into`."""
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            into.append(time.perf_counter() - t0)
    return wrapper


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a race model (race_models.py)")
    p.add_argument("--dir", required=True, help="where race_models.py wrote it")
    p.add_argument("--schedule", required=True, help="a class of torch.distributed.pipelining.schedules")
    p.add_argument("--stage-bounds", required=True, help="bounds of the stages in the model's pieces, e.g. 0,4,9")
    p.add_argument("--microbatches", type=int, required=True)
    p.add_argument("--microbatch-size", type=int, required=True)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=0, help="untimed steps first")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--timeout", type=float, default=300, help="seconds a collective may wait")
    p.add_argument("--save-params", help="write the trained parameters here (torch.save)")
    p.add_argument("--action-times", action="store_true",
                   help="time each stage's forward and backward calls in the timed steps and report, per rank, "
                        "their mean and the share of the time spent outside them")
    a = p.parse_args()
    placement = pin_like_pipetrain()  # before any thread starts: the ranks share cores as pipetrain's do

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    bounds = [int(b) for b in a.stage_bounds.split(",")]
    model = load(a.model, a.dir)
    parts = [piece for _, piece in pieces(a.model, model)]
    if bounds[0] != 0 or bounds[-1] != len(parts) or bounds != sorted(set(bounds)):
        raise SystemExit(f"--stage-bounds {a.stage_bounds} do not cut the model's {len(parts)} pieces")
    stage_count = len(bounds) - 1
    held = stages_of_rank(a.schedule, rank, world, stage_count)
    device = torch.device("cpu")
    modules = {s: nn.Sequential(*parts[bounds[s]:bounds[s + 1]]) for s in held}
    mine = {id(t) for m in modules.values() for t in m.state_dict(keep_vars=True).values()}
    for t in model.state_dict(keep_vars=True).values():
        if id(t) not in mine:  # another rank's: freed, as torchtitan builds only its own stages
            t.data = torch.empty(0)
    stages = [PipelineStage(modules[s], s, stage_count, device) for s in held]
    cls = getattr(schedules, a.schedule)
    single = issubclass(cls, schedules.PipelineScheduleSingle)
    schedule = cls(stages[0] if single else stages, n_microbatches=a.microbatches, loss_fn=loss)
    params = [q for m in modules.values() for q in m.parameters()]
    optimizer = torch.optim.SGD(params, lr=a.lr, momentum=0.9)

    data = torch.load(f"{a.dir}/{a.model}.data.pt")
    batch = a.microbatches * a.microbatch_size
    batches = data["inputs"].size(0) // batch
    if batches == 0:
        raise SystemExit(f"{a.model}: fewer samples than one mini-batch of {batch}")
    first, last = 0 in held, stage_count - 1 in held

    def train(steps, offset):
        for step in range(offset, offset + steps):
            rows = slice((step % batches) * batch, (step % batches + 1) * batch)
            args = (data["inputs"][rows],) if first else ()
            kwargs = {"target": data["labels"][rows], "losses": []} if last else {}
            optimizer.zero_grad(set_to_none=True)
            schedule.step(*args, **kwargs)
            optimizer.step()

    train(a.warmup_steps, 0)  # shape inference and buffers are set up in the first step
    spent = {}  # (stage, "F" or "B") -> seconds of each call, in the timed steps
    if a.action_times:
        for st in stages:
            for method, kind in (("forward_one_chunk", "F"), ("backward_one_chunk", "B")):
                setattr(st, method, timed(getattr(st, method), spent.setdefault((st.stage_index, kind), [])))
    dist.barrier()
    start = time.perf_counter()
    train(a.steps, a.warmup_steps)
    dist.barrier()
    seconds = time.perf_counter() - start
    actions = [None] * world
    dist.all_gather_object(actions, {"mean_seconds": {f"{k}{s}": sum(v) / len(v) for (s, k), v in spent.items() if v},
                                     "outside_actions_fraction": 1 - sum(map(sum, spent.values())) / seconds}
                           if a.action_times else None)

    rss = [None] * world
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    placements = [None] * world
    dist.all_gather_object(placements, placement)
    trained = [None] * world
    dist.all_gather_object(trained, {k: v.detach() for k, v in model.state_dict(keep_vars=True).items()
                                     if id(v) in mine} if a.save_params else None)
    if rank == 0:
        if a.save_params:
            torch.save({k: v for part in trained for k, v in part.items()}, a.save_params)
        print(json.dumps({"schedule": a.schedule, "world_size": world, "samples_per_second": a.steps * batch / seconds,
                          "seconds": seconds, "peak_rss_bytes": rss, "ranks_placed": placements,
                          **({"ranks": actions} if a.action_times else {})}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
