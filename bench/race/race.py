#!/usr/bin/env python3
"""The race: pipetrain against torch.distributed.pipelining and DDP, run side by side on
this machine, on the same models and weights (race_models.py: the zoo's shapes and models
nobody here wrote), over Gloo on CPUs.

Who runs what:
- torch.distributed.pipelining (pipelining_peer.py under torchrun) runs the eager model,
  its stages built from the model's own modules as torchtitan builds them, with
  ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B (2 stages per rank, looped),
  ScheduleInterleavedZeroBubble (ZB1P), ScheduleZBVZeroBubble and ScheduleDualPipeV
  (2 stages per rank, a V), at 4 micro-batches per rank, and for the schedules of
  `--peer-best` also at the other counts of `--peer-microbatches` (2 and 8 per rank), the
  mini-batch the same;
- pipetrain runs the same schedule (gpipe, 1f1b, interleaved --chunks 2, zb-h1, zb-v,
  dualpipev) on the same cuts and micro-batches, and its own choice (`train --batch N`),
  with and without `--allow-async`;
- DDP (ddp_peer.py under torchrun) runs the eager model at its documented best settings
  (gradient_as_bucket_view, static_graph), with 4 and 25 MiB buckets.

How it is timed: every run trains `--warmup-steps` untimed mini-batches and then
`--steps` timed ones (pipetrain's from its per-step log, the peers' barrier to barrier).
Every process of a comparison runs under one allocator setting (`--malloc`): `tuned`
sets glibc's tunables to pipetrain's glibc policy for every process (retain freed memory;
PIPETRAIN_MALLOC=retain), `glibc` leaves glibc's defaults for every process, pipetrain's
included (PIPETRAIN_MALLOC=glibc), and `tcmalloc` preloads tcmalloc for every process as
`pipetrain` does for its own (util/allocator.h), as PyTorch's CPU launcher does
(torch.backends.xeon.run_cpu). Each of `--rounds` rounds runs every configuration once, in a
random order; a run past `--timeout` seconds is killed and reported as such.

What it prints, for each model, process count and allocator setting: each
configuration's median samples/s, range and peak RSS of a rank, and paired ratios (one
per round; the median, and the geometric mean with its 95% interval): pipetrain's
schedules against the same schedule in torch.distributed.pipelining, pipetrain's plans
against the peer's best configuration (the fastest of its schedules and micro-batch
counts) and against DDP at its best bucket size. Every run's figures, with the machine's
details, go to `--out` (JSON).

    bench/race/race.py [--build build] [--rounds 7] [--steps 30] [--warmup-steps 3]
                       [--models mlp,gpt,...] [--nproc 2,3] [--malloc both|tuned|glibc|tcmalloc]
                       [--runs 1f1b,zb-h1,...,ddp,plan,async] [--microbatch-size N]
                       [--out bench/results/race-DATE.json]
"""
import argparse
import datetime
import json
import os
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from race_models import MODELS
from race_stats import describe, paired

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# torch.distributed.pipelining's schedule, pipetrain's, and stages per rank.
PAIRS = [("ScheduleGPipe", "gpipe", 1), ("Schedule1F1B", "1f1b", 1), ("ScheduleInterleaved1F1B", "interleaved", 2),
         ("ScheduleInterleavedZeroBubble", "zb-h1", 1), ("ScheduleZBVZeroBubble", "zb-v", 2),
         ("ScheduleDualPipeV", "dualpipev", 2)]
MICROBATCH_SIZE = {"mlp": 32, "gpt": 8, "fmnist-cnn": 32, "hf-gpt2": 8, "hf-llama": 8, "timm-vit": 16,
                   "tv-resnet": 16}
MICROBATCHES_PER_RANK = 4  # the paired runs'; the mini-batch is this times the ranks times the micro-batch size
TCMALLOC = next((f"{d}/libtcmalloc_minimal.so.4" for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                                                             "/usr/lib64", "/usr/lib", "/usr/local/lib")
                 if os.path.exists(f"{d}/libtcmalloc_minimal.so.4")), None)
MALLOC = {"tuned": {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647",
                    "PIPETRAIN_MALLOC": "retain"},
          "glibc": {"PIPETRAIN_MALLOC": "glibc"},
          "tcmalloc": {"LD_PRELOAD": TCMALLOC or "", "TCMALLOC_RELEASE_RATE": "0",
                       "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 60)}}
LR = 0.01


def microbatch_size(a, model):
    return a.microbatch_size or MICROBATCH_SIZE[model]


def even_bounds(pieces, stages):
    return [round(i * pieces / stages) for i in range(stages + 1)]


class Configuration:
    def __init__(self, name, command, kind, versus=None, log=None):
        self.name, self.command, self.kind, self.versus, self.log = name, command, kind, versus, log


class Race:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.bin = os.path.abspath(os.path.join(a.build, "pipetrain"))
        self.torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")

    def configurations(self, model, p):
        b = microbatch_size(self.a, model)
        batch = MICROBATCHES_PER_RANK * p * b
        pieces = json.load(open(f"{self.work}/{model}.pieces.json"))
        layer_of = pieces["layer_bounds"]
        steps = ["--steps", str(self.a.steps), "--warmup-steps", str(self.a.warmup_steps)]
        torchrun = [self.torchrun, "--standalone", "--nproc-per-node", str(p)]
        peer = ["--model", model, "--dir", self.work, "--lr", str(LR), "--timeout", str(self.a.timeout)] + steps
        log = f"{self.work}/steps.jsonl"
        ours = [self.bin, "train", "--model-file", f"{self.work}/{model}.pt",
                "--data-file", f"{self.work}/{model}.data.pt", "--nproc", str(p), "--optimizer", "sgd",
                "--lr", str(LR), "--epochs", "1", "--max-steps", str(self.a.warmup_steps + self.a.steps),
                "--no-eval", "--timeout", "120", "--summary-json", f"{self.work}/summary.json", "--log-jsonl", log]
        wanted, best_of = self.a.runs.split(","), self.a.peer_best.split(",")
        runs = []
        for peer_schedule, schedule, per_rank in PAIRS:
            stages = p * per_rank
            if schedule not in wanted or stages > len(pieces["pieces"]):
                continue  # fewer pieces than stages: neither system can cut it
            cut = even_bounds(len(pieces["pieces"]), stages)
            counts = self.a.peer_microbatches if schedule in best_of else [MICROBATCHES_PER_RANK]
            for k in counts:
                m = k * p
                if m < stages or batch % m:
                    continue  # fewer micro-batches than stages, or a batch they do not divide
                runs.append(Configuration(
                    f"torch {peer_schedule} {m}x{batch // m}",
                    torchrun + [f"{HERE}/pipelining_peer.py", "--schedule", peer_schedule,
                                "--stage-bounds", ",".join(map(str, cut)), "--microbatches", str(m),
                                "--microbatch-size", str(batch // m)] + peer, "peer"))
            m = MICROBATCHES_PER_RANK * p
            chunks = ["--chunks", str(per_rank)] if schedule == "interleaved" else []
            runs.append(Configuration(
                f"pipetrain {schedule} {m}x{b}",
                ours + ["--schedule", schedule, "--stage-bounds", ",".join(str(layer_of[i]) for i in cut),
                        "--microbatches", str(m), "--microbatch-size", str(b)] + chunks,
                "ours", versus=f"torch {peer_schedule} {m}x{b}", log=log))
        if "ddp" in wanted:
            for mb in (4, 25):
                runs.append(Configuration(f"torch DDP, {mb} MiB buckets",
                                          torchrun + [f"{HERE}/ddp_peer.py", "--batch", str(batch),
                                                      "--bucket-mb", str(mb)] + peer, "ddp"))
        gloo_plan = "pipetrain's plan, sums over gloo"
        if "plan" in wanted:
            # Its sums go through shared memory (train's default between CPU ranks of one host);
            # paired with the same plan summing over Gloo where plan-gloo runs too.
            runs.append(Configuration("pipetrain's plan", ours + ["--batch", str(batch)], "plan", log=log,
                                      versus=gloo_plan if "plan-gloo" in wanted else None))
        if "plan-gloo" in wanted:
            runs.append(Configuration(gloo_plan, ours + ["--batch", str(batch), "--wire", "gloo"], "plan", log=log))
        if "async" in wanted:
            runs.append(Configuration("pipetrain's plan, async allowed", ours + ["--batch", str(batch), "--allow-async"],
                                      "plan", log=log))
        return runs

    def run(self, c, malloc):
        """{samples_per_second, peak_rss_bytes} of one run, or {error}."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("GLIBC_TUNABLES", "PIPETRAIN_MALLOC", "LD_PRELOAD", "TCMALLOC_RELEASE_RATE")}
        env.update(MALLOC[malloc])
        proc = subprocess.Popen(c.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=HERE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.a.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"error": f"timed out after {self.a.timeout:.0f} s"}
        printed = None if c.log else peer_result(out)
        if proc.returncode != 0:
            lines = (err + out).splitlines()
            # A rank's own error before torchrun's summary of it (ChildFailedError).
            errors = [l.split("]: ", 1)[-1] for l in lines if l.startswith("[rank") and "Error" in l]
            errors += [l.split("]: ", 1)[-1] for l in lines if "Error: " in l or "error: " in l]
            why = f"exit {proc.returncode}: " + (errors[0] if errors else lines[-1] if lines else "")[:160]
            if printed is None:
                return {"error": why, "output_tail": lines[-40:]}
            # It trained and printed its result, then died on the way out (a DDP process
            # group torn down at exit): the result counts, the abort is reported beside it.
            return dict(printed, abort_at_exit=why)
        if c.log:
            return self.ours(c)
        return printed

    def ours(self, c):
        """pipetrain's samples/s over the steps after the warm-up (timed_window)."""
        summary = json.load(open(f"{self.work}/summary.json"))
        out = timed_window(summary, c.log, self.a.warmup_steps, self.a.steps)
        if "error" in out:
            return out
        # Where each rank's time went, over every step (warm-up included), as fractions:
        # blocked on a message, waiting for a core, and pipetrain's own work (the rest is
        # compute); and each action's mean time.
        out["ranks"] = [{k: r[k] for k in ("wait_fraction", "core_wait_fraction", "overhead_fraction",
                                            "bubble_fraction", "action_seconds")} for r in summary["ranks"]]
        return out


def peer_result(out):
    """What a peer printed last (its JSON line): samples/s, peak RSS and where its ranks
    ran (threads, pinned CPU); None where it printed none."""
    for line in reversed(out.strip().splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and "samples_per_second" in result:
            return {"samples_per_second": result["samples_per_second"], "peak_rss_bytes": max(result["peak_rss_bytes"]),
                    "ranks_placed": result.get("ranks_placed")}
    return None


def timed_window(summary, log, warmup_steps, steps):
    """pipetrain's samples/s over the steps after the warm-up, from its per-step log
    `log` and its summary: {samples_per_second, peak_rss_bytes, plan}, or {error}.
    The line of step k (1-based) holds the clock at the end of step k (the reporting
    rank's last action on its micro-batches; the line is written a mini-batch later,
    runtime::MinibatchDone), so the timed window runs from the line of step W (the end
    of the warm-up) to the last line."""
    lines = [json.loads(l) for l in open(log) if '"event":"step"' in l.replace(" ", "")]
    if len(lines) != warmup_steps + steps:
        return {"error": f"{len(lines)} steps logged, {warmup_steps + steps} run"}
    per_step = summary["samples"] / len(lines)
    seconds = lines[-1]["wall_seconds"] - lines[warmup_steps - 1]["wall_seconds"]
    return {"samples_per_second": steps * per_step / seconds,
            "peak_rss_bytes": max(r["peak_memory_bytes"] for r in summary["ranks"]), "plan": plan_of(summary["plan"])}


def plan_of(plan):
    replicas = "/".join(str(len(stage["devices"])) for stage in plan["stages"])
    return (f"{plan['schedule']['name']}, {len(plan['stages'])} stage(s) of {replicas} replica(s), "
            f"micro-batch {plan['microbatch_size']} x {plan['microbatches']}")


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    versions = {"torch": torch.__version__}
    for package in ("transformers", "timm", "torchvision"):
        try:
            versions[package] = __import__(package).__version__
        except ImportError:
            pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
            "versions": versions, "pipetrain": rev.stdout.strip(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=30, help="timed steps of each run")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps first")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--nproc", default="2,3")
    p.add_argument("--malloc", default="both", choices=["both", "tuned", "glibc", "tcmalloc"],
                   help="both: tuned and glibc")
    p.add_argument("--runs", default=",".join([s for _, s, _ in PAIRS] + ["ddp", "plan", "async"]),
                   help="which to run: pipetrain's schedule names (each with its torch peer), ddp, plan, "
                        "plan-gloo (the plan with its sums over Gloo instead of shared memory), async")
    p.add_argument("--peer-best", default=",".join(s for _, s, _ in PAIRS),
                   help="schedules the peer also runs at the other micro-batch counts (default: every one)")
    p.add_argument("--peer-microbatches", default="1,2,4,8",
                   help="micro-batches per rank the peer tries (those fewer than its stages are skipped)")
    p.add_argument("--microbatch-size", type=int,
                   help="samples per micro-batch for every model (default: each model's own, MICROBATCH_SIZE); "
                        "small ones race the runtimes' cost per action")
    p.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    p.add_argument("--seed", type=int, default=0, help="of the rounds' random orders")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results",
                                                 f"race-{datetime.datetime.now():%Y%m%d-%H%M}.json"))
    a = p.parse_args()
    if a.warmup_steps < 1:
        p.error("--warmup-steps must be 1 or more: pipetrain's timed window starts at the end of the warm-up's last step")
    a.peer_microbatches = [int(k) for k in a.peer_microbatches.split(",")]
    if MICROBATCHES_PER_RANK not in a.peer_microbatches:
        a.peer_microbatches.append(MICROBATCHES_PER_RANK)
    models, nprocs = a.models.split(","), [int(n) for n in a.nproc.split(",")]
    mallocs = ["tuned", "glibc"] if a.malloc == "both" else [a.malloc]
    if "tcmalloc" in mallocs and not TCMALLOC:
        p.error("--malloc tcmalloc: this machine has no libtcmalloc_minimal.so.4 (Debian: libtcmalloc-minimal4)")
    random.seed(a.seed)
    with tempfile.TemporaryDirectory() as work:
        race = Race(a, work)
        for model in models:
            samples = (a.warmup_steps + a.steps) * MICROBATCHES_PER_RANK * max(nprocs) * microbatch_size(a, model)
            subprocess.run([sys.executable, f"{HERE}/race_models.py", model, work, "--samples", str(samples)],
                           check=True)
        table = {(model, n, m): race.configurations(model, n) for model in models for n in nprocs for m in mallocs}
        results = {key: {c.name: [] for c in runs} for key, runs in table.items()}
        for r in range(a.rounds):
            order = [(key, c) for key, runs in table.items() for c in runs]
            random.shuffle(order)
            for key, c in order:
                began = time.perf_counter()
                results[key][c.name].append(dict(race.run(c, key[2]), round=r + 1,
                                                 wall_seconds=round(time.perf_counter() - began, 1)))
                print(f"round {r + 1}/{a.rounds} {key[0]} x{key[1]} {key[2]} {c.name}: {results[key][c.name][-1]}",
                      file=sys.stderr, flush=True)
    ratios = report(table, results, a)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump({"machine": machine(), "arguments": vars(a), "ratios": ratios,
               "runs": {f"{m} x{n} {malloc}": v for (m, n, malloc), v in results.items()}},
              open(a.out, "w"), indent=1)
    print(f"\nevery run's figures: {a.out}")


def report(table, results, a):
    """Prints the tables; returns every paired ratio, by comparison."""
    print(f"{a.rounds} rounds in random order, {a.steps} timed steps after {a.warmup_steps} of warm-up; ratios "
          "paired by round: median, geometric mean and its 95% interval")
    every = {}
    for (model, p, malloc), runs in table.items():
        got = results[(model, p, malloc)]
        sps = {name: [x.get("samples_per_second") for x in xs] for name, xs in got.items()}
        ok = {name: [v for v in xs if v] for name, xs in sps.items()}
        median = {name: statistics.median(v) for name, v in ok.items() if v}
        peers = [c.name for c in runs if c.kind == "peer" and c.name in median]
        ddps = [c.name for c in runs if c.kind == "ddp" and c.name in median]
        best_pipeline = max(peers, key=median.get) if peers else None
        best_ddp = max(ddps, key=median.get) if ddps else None
        # The peer's best is what a torch user could run at best: its pipelines or DDP.
        best = max(peers + ddps, key=median.get) if peers or ddps else None
        print(f"\n{model}, {p} processes, mini-batch {MICROBATCHES_PER_RANK * p * microbatch_size(a, model)}, "
              f"malloc {malloc}")
        print("| configuration | samples/s | range | peak RSS MiB | paired ratio |")
        print("|---|---|---|---|---|")
        for c in runs:
            failures = [x["error"] for x in got[c.name] if "error" in x]
            if c.name not in median:
                print(f"| {c.name} | — | {failures[0] if failures else ''} | | |")
                continue
            against = []
            if c.versus:
                against.append((c.versus, c.versus))
            if c.kind == "plan":
                against += [(best, "the peer's best, " + (best or ""))]
                against += [(other, other) for other in (best_pipeline, best_ddp) if other != best]
            cells = []
            for other, label in against:
                if other and other in median:
                    r = paired(sps[c.name], sps[other])
                    every[f"{model} x{p} {malloc}: {c.name} / {label}"] = r
                    cells.append(f"{describe(r)} against {label}" if c.kind == "plan" else describe(r))
            rss = statistics.median(x["peak_rss_bytes"] for x in got[c.name] if "error" not in x) / 2**20
            note = f" ({len(failures)} failed: {failures[0]})" if failures else ""
            aborts = [x["abort_at_exit"] for x in got[c.name] if "abort_at_exit" in x]
            if aborts:
                note += f" ({len(aborts)} counted though they aborted at exit: {aborts[0]})"
            print(f"| {c.name} | {median[c.name]:.1f} | {min(ok[c.name]):.1f}–{max(ok[c.name]):.1f} | {rss:.0f} | "
                  f"{'; '.join(cells)}{note} |")
        chosen = {x.get("plan") for c in runs if c.kind == "plan" for x in got[c.name] if x.get("plan")}
        if chosen:
            print("plans chosen: " + "; ".join(sorted(chosen)))
        print(placement_line(runs, got, p))
    return every


def placement_line(runs, got, p):
    """Where the peers' ranks ran, against pipetrain's rule for its own (one BLAS thread a
    rank where the ranks fill the cores; pinned, local rank r on CPU r mod the CPUs, where
    they outnumber them): the same on both sides, or the difference named."""
    cpus = len(os.sched_getaffinity(0))
    threads = max(1, cpus // p)
    placed = [r for c in runs if c.kind in ("peer", "ddp") for x in got[c.name] for r in (x.get("ranks_placed") or [])]
    seen_threads = sorted({r["threads"] for r in placed})
    pinned = sorted({r["pinned_cpu"] is not None for r in placed})
    same = seen_threads in ([], [threads]) and pinned in ([], [p > cpus])
    return (f"ranks: pipetrain {threads} thread(s) each, {'pinned' if p > cpus else 'unpinned'}; the peers "
            f"{seen_threads or '?'} thread(s), {'pinned' if pinned == [True] else 'unpinned' if pinned == [False] else pinned}"
            + ("" if same else " (NOT the same: the ratios compare unlike placements)"))


if __name__ == "__main__":
    main()
