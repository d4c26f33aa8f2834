#!/usr/bin/env python3
"""The race: pipetrain against torch.distributed.pipelining and DDP, on the same machine,
the same models (one TorchScript file each, race_models.py) and the same weights.

For each model and each process count, over Gloo on CPUs:
- torch.distributed.pipelining (pipelining_peer.py under torchrun) with ScheduleGPipe,
  Schedule1F1B, ScheduleInterleaved1F1B (2 stages per rank, looped),
  ScheduleInterleavedZeroBubble (ZB1P, one stage per rank), ScheduleZBVZeroBubble and
  ScheduleDualPipeV (2 stages per rank, a V);
- pipetrain with the same schedule (gpipe, 1f1b, interleaved --chunks 2, zb-h1, zb-v,
  dualpipev), the same stage cuts (layers split evenly) and the same micro-batching;
- pipetrain's own choice (`train --batch N`), with and without `--allow-async`;
- PyTorch's DDP (ddp_peer.py under torchrun).
Every run trains `--steps` mini-batches of 4p micro-batches with SGD; samples/s counts
every step, as pipetrain's summary does. The configurations alternate, `--repeats`
rounds; a run past `--timeout` seconds is killed and reported as such.

    bench/race/race.py [--build build] [--repeats 3] [--steps 20] [--models mlp,gpt,fmnist-cnn]
                       [--nproc 2,3] [--json results.json]

Prints, per model and process count, each configuration's median samples/s, its range,
the largest peak RSS of a rank (MiB), and its ratio to the peer: pipetrain's schedules
against the same schedule in torch.distributed.pipelining, pipetrain's plans against the
peer's fastest schedule and against DDP.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# torch.distributed.pipelining's schedule, pipetrain's, and stages per rank.
PAIRS = [("ScheduleGPipe", "gpipe", 1), ("Schedule1F1B", "1f1b", 1), ("ScheduleInterleaved1F1B", "interleaved", 2),
         ("ScheduleInterleavedZeroBubble", "zb-h1", 1), ("ScheduleZBVZeroBubble", "zb-v", 2),
         ("ScheduleDualPipeV", "dualpipev", 2)]
MICROBATCH_SIZE = {"mlp": 32, "gpt": 8, "fmnist-cnn": 32}
LR = 0.01


def even_bounds(layers, stages):
    return [round(i * layers / stages) for i in range(stages + 1)]


class Race:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.bin = os.path.join(a.build, "pipetrain")
        self.torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")

    def files(self, model):
        return f"{self.work}/{model}.pt", f"{self.work}/{model}.data.pt"

    def configurations(self, model, p):
        """(name, the peer's name to compare with or None, command, reads pipetrain's summary)."""
        m, b = 4 * p, MICROBATCH_SIZE[model]
        model_file, data_file = self.files(model)
        layers = len(list(torch.jit.load(model_file).children()))
        summary = f"{self.work}/summary.json"
        torchrun = [self.torchrun, "--standalone", "--nproc-per-node", str(p)]
        common = ["--model-file", model_file, "--data-file", data_file, "--steps", str(self.a.steps), "--lr", str(LR),
                  "--timeout", str(self.a.timeout)]
        ours = [self.bin, "train", "--model-file", model_file, "--data-file", data_file, "--nproc", str(p),
                "--optimizer", "sgd", "--lr", str(LR), "--epochs", "1", "--max-steps", str(self.a.steps),
                "--no-eval", "--timeout", "120", "--summary-json", summary]
        runs = []
        wanted = self.a.runs.split(",")
        for peer, schedule, per_rank in PAIRS:
            stages = p * per_rank
            if schedule not in wanted:
                continue
            if stages > layers:
                continue  # fewer layers than stages: neither system can cut it
            bounds = ",".join(map(str, even_bounds(layers, stages)))
            runs.append((f"torch {peer}", None,
                         torchrun + [f"{HERE}/pipelining_peer.py", "--schedule", peer, "--stage-bounds", bounds,
                                     "--microbatches", str(m), "--microbatch-size", str(b)] + common, False))
            chunks = ["--chunks", str(per_rank)] if schedule == "interleaved" else []
            runs.append((f"pipetrain {schedule}", f"torch {peer}",
                         ours + ["--schedule", schedule, "--stage-bounds", bounds, "--microbatches", str(m),
                                 "--microbatch-size", str(b)] + chunks, True))
        if "ddp" in wanted:
            runs.append(("torch DDP", None, torchrun + [f"{HERE}/ddp_peer.py", "--batch", str(m * b)] + common, False))
        if "plan" in wanted:
            plan = ours + ["--batch", str(m * b), "--plan-out", f"{self.work}/{model}-{p}.plan.json"]
            runs.append(("pipetrain's plan", "best", plan, True))
        if "async" in wanted:
            async_plan = ours + ["--batch", str(m * b), "--allow-async", "--plan-out",
                                 f"{self.work}/{model}-{p}.async.json"]
            runs.append(("pipetrain's plan, async allowed", "best", async_plan, True))
        return runs

    def run(self, command, ours):
        """(samples/s, largest peak RSS of a rank) of one run, or the reason it has none."""
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.a.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return f"timed out after {self.a.timeout:.0f} s"
        if proc.returncode != 0:
            lines = (err + out).splitlines()
            errors = [l.split("]: ", 1)[-1] for l in lines if "Error: " in l or "error: " in l]
            return f"exit {proc.returncode}: " + (errors[0] if errors else lines[-1] if lines else "")[:100]
        if ours:
            s = json.load(open(f"{self.work}/summary.json"))
            return s["throughput"], max(r["peak_memory_bytes"] for r in s["ranks"])
        result = json.loads(out.strip().splitlines()[-1])
        return result["samples_per_second"], max(result["peak_rss_bytes"])


def plan_of(path):
    try:
        plan = json.load(open(path))
    except OSError:
        return "?"
    replicas = "/".join(str(len(stage["devices"])) for stage in plan["stages"])
    return (f"{plan['schedule']['name']}, {len(plan['stages'])} stage(s) of {replicas} replica(s), "
            f"micro-batch {plan['microbatch_size']} x {plan['microbatches']}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--models", default="mlp,gpt,fmnist-cnn")
    p.add_argument("--nproc", default="2,3")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    p.add_argument("--json", help="write every run's figures here")
    p.add_argument("--runs", default=",".join([s for _, s, _ in PAIRS] + ["ddp", "plan", "async"]),
                   help="which to run: pipetrain's schedule names (each with its torch peer), ddp, plan, async")
    a = p.parse_args()
    models, nprocs = a.models.split(","), [int(n) for n in a.nproc.split(",")]
    with tempfile.TemporaryDirectory() as work:
        race = Race(a, work)
        for model in models:
            samples = a.steps * 4 * max(nprocs) * MICROBATCH_SIZE[model]  # one epoch holds every step
            subprocess.run([sys.executable, f"{HERE}/race_models.py", model, work, "--samples", str(samples)],
                           check=True)
        table = {(model, n): race.configurations(model, n) for model in models for n in nprocs}
        results = {key: {name: [] for name, *_ in runs} for key, runs in table.items()}
        for r in range(a.repeats):
            for key, runs in table.items():
                for name, _, command, ours in runs:
                    results[key][name].append(race.run(command, ours))
                    print(f"round {r + 1}/{a.repeats} {key[0]} x{key[1]} {name}: {results[key][name][-1]}",
                          file=sys.stderr, flush=True)
        report(table, results, a, work)
    if a.json:
        json.dump({f"{m} x{n}": v for (m, n), v in results.items()}, open(a.json, "w"), indent=1)


def report(table, results, a, work):
    print(f"median of {a.repeats} alternating runs of {a.steps} steps each; ratio: pipetrain against the same "
          "schedule in torch.distributed.pipelining, pipetrain's plans against the peer's fastest schedule and DDP")
    for (model, p), runs in table.items():
        figures = {}
        for name, *_ in runs:
            ok = [x for x in results[(model, p)][name] if isinstance(x, tuple)]
            figures[name] = ok
        median = {n: statistics.median(x[0] for x in f) for n, f in figures.items() if f}
        peers = [n for n in median if n.startswith("torch Schedule")]
        best = max(peers, key=median.get) if peers else None
        print(f"\n{model}, {p} processes, micro-batch {MICROBATCH_SIZE[model]} x {4 * p}")
        print(f"| {'configuration':34} | samples/s | range | peak RSS MiB | ratio |")
        print("|---|---|---|---|---|")
        for name, peer, *_ in runs:
            failures = [x for x in results[(model, p)][name] if not isinstance(x, tuple)]
            if name not in median:
                print(f"| {name:34} | — | {failures[0]} | | |")
                continue
            f = figures[name]
            ratio = ""
            if peer == "best" and best:
                ratio = f"{median[name] / median[best]:.2f}x {best[6:]}"
                if "torch DDP" in median:
                    ratio += f", {median[name] / median['torch DDP']:.2f}x DDP"
            elif peer in median:
                ratio = f"{median[name] / median[peer]:.2f}x"
            note = f" ({len(failures)} failed: {failures[0]})" if failures else ""
            print(f"| {name:34} | {median[name]:.1f} | {min(x[0] for x in f):.1f}–{max(x[0] for x in f):.1f} | "
                  f"{statistics.median(x[1] for x in f) / 2**20:.0f} | {ratio}{note} |")
        print(f"pipetrain's plan: {plan_of(f'{work}/{model}-{p}.plan.json')}; "
              f"async allowed: {plan_of(f'{work}/{model}-{p}.async.json')}")


if __name__ == "__main__":
    main()
