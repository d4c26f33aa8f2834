#!/usr/bin/env python3
"""Recomputation measured on this machine: `train` under `--recompute none`, `full` and
`auto`, with the memory each rank is planned with (`--rank-memory`) set low enough that
the zoo's gpt does not fit without recomputation at the run's micro-batching.

The profile cache is the bench's own, taught by a first run (reported apart) what a
process holds beyond its tensors, so --rank-memory is what a rank holds in all. Each
round runs the policies in a random order (this machine's speed drifts); per run it
records the plan the planner chose (which stages recompute), the steady throughput over
the steps after the warm-up (from --log-jsonl, as bench/race/race.py reads it), the
planner's prediction, and each rank's peak resident memory above what it held before
training, against the planner's predicted peak. A policy with no plan is reported with
its reason. Prints medians and ranges over the rounds, auto against full as a paired
ratio per round.
Usage: bench/recompute/measured.py [--build build] [--rounds 5] [--rank-memory 240MiB] [--schedule gpipe]
                                   [--out F.json]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODEL = ["--model", "gpt", "--model-option", "layers=8", "--model-option", "width=256",
         "--model-option", "context=128", "--model-option", "heads=4"]
WARMUP, STEPS = 3, 12


def run(binary, policy, rank_memory, schedule, work):
    log, summary = os.path.join(work, "steps.jsonl"), os.path.join(work, "summary.json")
    for f in (log, summary):
        if os.path.exists(f):
            os.remove(f)
    cmd = [binary, "train"] + MODEL + [
        "--dataset", "synthetic", "--nproc", "2", "--microbatches", "8", "--microbatch-size", "8",
        "--no-replication", "--schedule", schedule, "--optimizer", "sgd", "--lr", "0.01", "--epochs", "1",
        "--max-steps", str(WARMUP + STEPS), "--no-eval", "--recompute", policy, "--rank-memory", rank_memory,
        "--summary-json", summary, "--log-jsonl", log]
    env = dict(os.environ, PIPETRAIN_CACHE_DIR=os.path.join(work, "cache"))  # this bench's profiles only
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=work, env=env)
    if p.returncode != 0:
        lines = (p.stderr + p.stdout).strip().splitlines()
        reason = next((l for l in lines if "no partition" in l or "needs" in l), lines[-1] if lines else "failed")
        return {"fits": False, "reason": reason.strip()}
    s = json.load(open(summary))
    steps = [json.loads(l) for l in open(log) if '"event":"step"' in l.replace(" ", "")]
    per_step = s["samples"] / len(steps)
    # The line of step k holds when step k ended (runtime::MinibatchDone): the window runs
    # from the end of the warm-up's last step to the end of the last.
    seconds = steps[-1]["wall_seconds"] - steps[WARMUP - 1]["wall_seconds"]
    chosen = s["planner"]["chosen"]
    return {
        "fits": True,
        "plan": "%s, stages of %s layers, recomputing %s" % (
            s["plan"]["schedule"]["name"], "+".join(str(len(st["layers"])) for st in s["plan"]["stages"]),
            ",".join(str(i) + ("(%d/%d)" % (st["recompute_layers"], len(st["layers"])) if st.get("recompute_layers") else "")
                     for i, st in enumerate(s["plan"]["stages"]) if st.get("recompute")) or "none"),
        "throughput": STEPS * per_step / seconds,
        "predicted_throughput": chosen["throughput"],
        "peak_bytes": [r["peak_memory_bytes"] - r["start_memory_bytes"] for r in s["ranks"]],
        "predicted_peak_bytes": chosen["rank_peak_memory_bytes"],
    }


def spread(values):
    return "%.4g (%.4g-%.4g)" % (statistics.median(values), min(values), max(values))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rank-memory", default="240MiB")
    ap.add_argument("--policies", default="none,full,auto")
    ap.add_argument("--schedule", default="gpipe",
                    help="fixed, so that the policies differ in recomputation and stages only (gpipe holds "
                         "every micro-batch: where memory binds most)")
    ap.add_argument("--out")
    a = ap.parse_args()
    binary = os.path.join(a.build, "pipetrain")
    policies = a.policies.split(",")
    results = {p: [] for p in policies}
    with tempfile.TemporaryDirectory() as work:
        # A first run profiles the model and teaches the profile what the process holds
        # beyond its tensors (docs/profiling.md#memory-the-process-holds), as a user's
        # first run does; the rounds then plan as every later run would.
        first = run(binary, "full", a.rank_memory, a.schedule, work)
        print("first run (full, teaches the profile) %s" % json.dumps(first), flush=True)
        for r in range(a.rounds):
            order = random.sample(policies, len(policies))
            for policy in order:
                res = run(binary, policy, a.rank_memory, a.schedule, work)
                results[policy].append(res)
                print("round %d %-5s %s" % (r + 1, policy, json.dumps(res)), flush=True)
    mib = 1 << 20
    for policy in policies:
        runs = [x for x in results[policy] if x["fits"]]
        if not runs:
            print("%-5s no plan: %s" % (policy, results[policy][0]["reason"]))
            continue
        # The planner may choose other plans in other rounds (each run sharpens the cached
        # profile's times): every plan it chose, how often.
        plans = sorted({x["plan"] for x in runs})
        print("%-5s %s | samples/s %s, predicted %s | peak MiB per rank %s, predicted %s" % (
            policy, "; ".join("%s (%dx)" % (p, sum(x["plan"] == p for x in runs)) for p in plans),
            spread([x["throughput"] for x in runs]), spread([x["predicted_throughput"] for x in runs]),
            [round(statistics.median(x["peak_bytes"][k] for x in runs) / mib) for k in range(len(runs[0]["peak_bytes"]))],
            [round(statistics.median(x["predicted_peak_bytes"][k] for x in runs) / mib)
             for k in range(len(runs[0]["predicted_peak_bytes"]))]))
    if "auto" in results and "full" in results:
        pairs = [x["throughput"] / y["throughput"] for x, y in zip(results["auto"], results["full"])
                 if x["fits"] and y["fits"]]
        if pairs:
            print("auto / full, paired per round: %s" % spread(pairs))
    if a.out:
        json.dump({"rank_memory": a.rank_memory, "first_run": first, "results": results}, open(a.out, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
