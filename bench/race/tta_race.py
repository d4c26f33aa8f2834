#!/usr/bin/env python3
"""Time to accuracy where the network binds, PipeDream's own metric: the same model, real
data (Fashion-MNIST), global batch, optimizer (SGD, momentum 0.9) and initial weights,
trained to a test accuracy on hosts joined by a shaped link (bench/hosts/hosts.py), one
rank and one thread per host, every process under torchrun, as network_race.py runs them:

- **DDP** (ddp_peer.py --epochs) at its documented best settings, 25 MiB buckets;
- **pipetrain's plan** (`train --batch N`, no plan given: the job measures the link,
  profiles, plans for throughput and trains);
- **pipetrain planning for time to accuracy** (`--objective time-to-accuracy
  --allow-async`: asynchronous plans may win if their progress per sample allows);
- where asked (`--runs ...,dp`), pipetrain's data parallelism (`--data-parallel`).

Every run trains `--epochs` "epochs" of `--epoch-steps` mini-batches, each a fresh shuffle
of the training set, and evaluates on the first `--test-samples` test images after each
(outside the training time); DDP stops at the first evaluation at `--target`. A run's
time to accuracy is the training seconds (inside training steps, evaluation excluded) up
to its first evaluation at the target. pipetrain's setup before training (profiling,
measuring the link, planning, calibrating) is listed beside it: on a first run it is paid
once per model and hosts, later runs take it from the cache. Each of `--rounds` rounds
runs every configuration once, in a random order, each pipetrain run with an empty cache
(a fresh job, as a new user's first).

    bench/race/tta_race.py [--model tv-vgg] [--rate 1gbit] [--target 0.8] [--epochs 12]
                           [--epoch-steps 16] [--batch 64] [--rounds 1] [--out F.json]

Needs root (network namespaces); exits 77 where they cannot be made.
"""
import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from race import HERE, MALLOC, REPO, machine, plan_of

sys.path.insert(0, os.path.join(REPO, "bench", "hosts"))
from hosts import SKIP, Hosts, Unavailable, stop_on_signals, torchrun_command  # noqa: E402

LR = 0.01


def configurations(a, work):
    pipetrain = os.path.abspath(os.path.join(a.build, "pipetrain"))
    ours = [pipetrain, "train", "--model-file", f"{work}/{a.model}.pt", "--data-file", f"{work}/{a.model}.data.pt",
            "--optimizer", "sgd", "--lr", str(LR), "--epochs", str(a.epochs), "--max-steps", str(a.epoch_steps),
            "--seed", str(a.seed), "--timeout", "300", "--summary-json", f"{work}/summary.json"]
    runs = {"ddp": ("torch DDP, 25 MiB buckets",
                    [sys.executable, f"{HERE}/ddp_peer.py", "--model", a.model, "--dir", work, "--batch",
                     str(a.batch), "--bucket-mb", "25", "--lr", str(LR), "--steps", str(a.epoch_steps), "--epochs",
                     str(a.epochs), "--target-accuracy", str(a.target), "--seed", str(a.seed), "--timeout", "600"]),
            "plan": ("pipetrain's plan", ours + ["--batch", str(a.batch)]),
            "tta": ("pipetrain's plan for time to accuracy",
                    ours + ["--batch", str(a.batch), "--objective", "time-to-accuracy", "--allow-async"]),
            "dp": ("pipetrain data parallel", ours + ["--data-parallel", "--microbatches", str(a.hosts),
                                                      "--microbatch-size", str(a.batch // a.hosts)])}
    unknown = set(a.runs.split(",")) - set(runs)
    if unknown:
        raise SystemExit(f"--runs: unknown {', '.join(sorted(unknown))}; from {', '.join(runs)}")
    return {kind: runs[kind] for kind in a.runs.split(",")}


def run(a, hosts, kind, command, work, port):
    """One run to accuracy: {history, setup_seconds, plan, ...} or {error}."""
    for stale in ("summary.json", "cache"):
        path = os.path.join(work, stale)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    env = dict(MALLOC["tuned"], OMP_NUM_THREADS="1", PYTHONPATH=HERE, GLOO_SOCKET_IFNAME="eth0",
               PIPETRAIN_CACHE_DIR=f"{work}/cache")
    logs = lambda i: f"{work}/host.{i}.log"  # noqa: E731
    began = time.perf_counter()
    statuses = hosts.run(lambda i: torchrun_command(hosts, 1, port, command), env=env, timeout=a.timeout, logs=logs)
    wall = time.perf_counter() - began
    out = open(logs(0)).read()
    if statuses[0] is None:
        return {"error": f"timed out after {a.timeout:.0f} s", "wall_seconds": wall}
    results = [l for l in out.splitlines() if l.startswith("{")]
    if kind == "ddp":
        if not results:  # a result printed before an abort at exit counts, as in network_race.py
            return {"error": f"exit {statuses}: " + "\n".join(out.splitlines()[-5:]), "wall_seconds": wall}
        result = json.loads(results[-1])
        return {"history": result["history"], "setup_seconds": 0.0, "wall_seconds": wall,
                "aborted_at_exit": statuses if any(statuses) else None}
    if any(statuses) or not os.path.exists(f"{work}/summary.json"):
        lines = (out + open(logs(1)).read()).splitlines()
        errors = [l for l in lines if "rror" in l]
        return {"error": f"exit {statuses}: " + (errors[0] if errors else lines[-1] if lines else "")[:300],
                "wall_seconds": wall}
    summary = json.load(open(f"{work}/summary.json"))
    planner = summary.get("planner") or {}
    setup = {"profiling": (planner.get("profile") or {}).get("seconds", 0.0),
             "planning": planner.get("planning_seconds", 0.0),
             "calibrating": (planner.get("calibration") or {}).get("seconds", 0.0)}
    said = [l for l in out.splitlines() if l.startswith(("measuring the network", "network", "plan", "chosen"))]
    return {"history": summary["history"], "setup_seconds": sum(setup.values()), "setup": setup,
            "wall_seconds": wall, "plan": plan_of(summary["plan"]), "asynchronous": summary.get("asynchronous"),
            "throughput": summary["throughput"],
            "predicted_samples_per_second": (planner.get("chosen") or {}).get("throughput"), "console": said[:12]}


def to_target(history, target):
    """The first evaluation at the target: (training seconds, samples, wall seconds), or None."""
    for point in history:
        if point["test_accuracy"] >= target:
            return point["train_seconds"], point["samples"], point["wall_seconds"]
    return None


def report(a, names, got):
    print(f"\n{a.model} at {a.rate}, {a.hosts} hosts, batch {a.batch}, to test accuracy {a.target} "
          f"({a.test_samples} test images), {a.rounds} round(s)")
    print("| configuration | training s to target | samples to target | setup s | samples/s | best accuracy | "
          "paired ratio of time to target against DDP |")
    print("|---|---|---|---|---|---|---|")
    reached = {kind: [to_target(x["history"], a.target) if "history" in x else None for x in xs]
               for kind, xs in got.items()}
    ratios = {}
    for kind, xs in got.items():
        times = [r[0] for r in reached[kind] if r]
        failures = [x["error"] for x in xs if "error" in x]
        if not times:
            best = max((p["test_accuracy"] for x in xs for p in x.get("history", [])), default=None)
            print(f"| {names[kind]} | not reached | | | | {best} | {failures[0] if failures else ''} |")
            continue
        samples = statistics.median(r[1] for r in reached[kind] if r)
        setup = statistics.median(x.get("setup_seconds", 0) for x in xs if "history" in x)
        rate = statistics.median(p["samples"] / p["train_seconds"] for x in xs if x.get("history")
                                 for p in x["history"][-1:])
        best = max(p["test_accuracy"] for x in xs for p in x.get("history", []))
        pairs = [t[0] / d[0] for t, d in zip(reached[kind], reached.get("ddp", [])) if t and d] \
            if kind != "ddp" else []
        if pairs:
            ratios[names[kind]] = pairs
        cell = (f"{statistics.median(pairs):.2f}x (rounds {', '.join(f'{p:.2f}' for p in pairs)})" if pairs else "")
        print(f"| {names[kind]} | {statistics.median(times):.1f} ({min(times):.1f}–{max(times):.1f}) | {samples:.0f} | "
              f"{setup:.1f} | {rate:.2f} | {best:.4f} | {cell} |")
    plans = {x["plan"] for xs in got.values() for x in xs if x.get("plan")}
    if plans:
        print("plans: " + "; ".join(sorted(plans)))
    return ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--model", default="tv-vgg", help="a race model of images (race_models.py)")
    ap.add_argument("--rate", default="1gbit", help="tc's rate of every link; none: unshaped")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--epoch-steps", type=int, default=16, help="mini-batches between evaluations")
    ap.add_argument("--target", type=float, default=0.8, help="the test accuracy to reach")
    ap.add_argument("--test-samples", type=int, default=1000)
    ap.add_argument("--runs", default="ddp,plan,tta", help="from ddp, plan, tta, dp")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="the data order's (both sides' own shuffle)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds one run may take")
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results",
                                                  f"tta-race-{datetime.datetime.now():%Y%m%d-%H%M}.json"))
    a = ap.parse_args()
    if not 0 < a.target <= 1:
        raise SystemExit(f"--target {a.target}: a test accuracy in (0, 1]")
    random.seed(a.seed)
    stop_on_signals()  # interrupted, the hosts are torn down all the same
    got = {}
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([sys.executable, f"{HERE}/race_models.py", a.model, work, "--samples", "0", "--data",
                        "fashion-mnist", "--test-samples", str(a.test_samples)], check=True)
        runs = configurations(a, work)
        names = {kind: name for kind, (name, _) in runs.items()}
        got = {kind: [] for kind in runs}
        port = 29800
        try:
            with Hosts(a.hosts, None if a.rate == "none" else a.rate) as hosts:
                for r in range(a.rounds):
                    order = list(runs)
                    random.shuffle(order)
                    for kind in order:
                        port += 1  # a fresh rendezvous port: the last agent's may linger in TIME_WAIT
                        result = dict(run(a, hosts, kind, runs[kind][1], work, port), round=r + 1)
                        got[kind].append(result)
                        shown = {k: v for k, v in result.items() if k not in ("history", "console")}
                        print(f"round {r + 1}/{a.rounds} {names[kind]}: {shown}; reached "
                              f"{to_target(result.get('history', []), a.target)}", file=sys.stderr, flush=True)
        except Unavailable as e:
            print(f"tta_race: skipped: cannot make network namespaces here ({e})", file=sys.stderr)
            return SKIP
    # The runs are kept before anything is made of them: an hour of runs outlives a fault below.
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    record = {"machine": machine(), "arguments": vars(a), "runs": got}
    json.dump(record, open(a.out, "w"), indent=1)
    record["ratios"] = report(a, names, got)
    json.dump(record, open(a.out, "w"), indent=1)
    print(f"\nevery run's figures: {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
