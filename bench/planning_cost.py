#!/usr/bin/env python3
"""What `pipetrain train` pays before it trains: seconds from the command's start until
it prints its plan (profiling, then planning), for every zoo model at its default size
on 2 and 3 ranks, with a cold profile cache and then with the cache the first run
filled. Several builds can be compared side by side (say, before and after a change):
the runs alternate between them, model by model.

    bench/planning_cost.py [--batch 32] [--ranks 2,3] [--models a,b] [--once LABEL] LABEL=BIN [LABEL=BIN ...]

Each run is stopped once the plan is printed: training is not what is measured. A build
without a profile cache would measure the same cold twice: `--once LABEL` runs it once."""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

ZOO = ["fmnist-cnn", "mlp", "vgg16", "resnet50", "gpt", "multimodal", "dlrm", "candle-uno", "fmnist-branch"]


def until_plan(binary, model, ranks, batch, cache, timeout):
    """Seconds until the plan line, and whether the profile came from the cache."""
    env = dict(os.environ, PIPETRAIN_CACHE_DIR=cache)
    cmd = [binary, "train", "--model", model, "--dataset", "synthetic", "--nproc", str(ranks), "--batch", str(batch),
           "--max-steps", "1", "--no-eval"]
    start = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    cached, seconds = False, None
    try:
        for line in p.stdout:
            cached |= line.startswith("profile: from the cache")
            if line.startswith("plan: "):
                seconds = time.monotonic() - start
                break
            if time.monotonic() - start > timeout:
                break
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return seconds, cached


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="LABEL=path/to/pipetrain")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ranks", default="2,3")
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--once", action="append", default=[], help="a build without a profile cache: one run each")
    a = ap.parse_args()
    builds = [b.split("=", 1) for b in a.builds]
    print(f"seconds until the plan is printed (train --batch {a.batch} --dataset synthetic), cold cache / cached")
    print(f"{'model':14} {'ranks':>5} " + " ".join(f"{label:>22}" for label, _ in builds))
    for model in a.models.split(","):
        for ranks in map(int, a.ranks.split(",")):
            cells = []
            for label, binary in builds:
                with tempfile.TemporaryDirectory() as cache:
                    cold, _ = until_plan(binary, model, ranks, a.batch, cache, a.timeout)
                    if label in a.once:
                        warm, hit = cold, False
                    else:
                        warm, hit = until_plan(binary, model, ranks, a.batch, cache, a.timeout)
                fmt = lambda s: "over %.0f" % a.timeout if s is None else "%.1f" % s
                cells.append(f"{fmt(cold):>10} / {fmt(warm):>6}{'' if hit else '*':1}")
            print(f"{model:14} {ranks:>5} " + " ".join(f"{c:>22}" for c in cells), flush=True)
    print("* not from a profile cache (--once, or the second run measured again)")


if __name__ == "__main__":
    sys.exit(main())
