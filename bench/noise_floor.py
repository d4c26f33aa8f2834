#!/usr/bin/env python3
"""How closely can any profile predict a run on this machine? The noise floor.

One process per core times the same fixed work (a 32 x 1024 by 1024 x 1024 matrix
product, one layer of the 8 x 1024 mlp at micro-batch 32, one thread) over and over for
a while, as two ranks would. Then, at many random moments, a "profile" is the median
speed over a short window and a "run" the median speed over the 2 s that begin a
second later (bench/prediction_accuracy.sh's runs last about that long). Work that
never changes makes the error of that profile the least error any prediction from a
profile can have here: the machine's own drift.

Usage: bench/noise_floor.py [seconds] [processes]   (defaults: 120, 2)
Needs the pinned torch of .venv (installed by `make deps`): run it with .venv/bin/python.
"""
import bisect
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time

RUN_SECONDS = 2.0  # a measured run
GAP_SECONDS = 1.0  # from the end of the profile to the start of the run
PROFILE_WINDOWS = (0.15, 0.5, 1.0, 4.0)  # 0.15 s: `train`'s 5 timed passes of the mlp


def worker(seconds, out_path):
    import torch

    torch.set_num_threads(1)
    weight, batch = torch.randn(1024, 1024), torch.randn(32, 1024)
    samples, start = [], time.perf_counter()
    while True:
        t = time.perf_counter()
        if t - start > seconds:
            break
        for _ in range(10):
            torch.mm(batch, weight)
        samples.append((t - start, (time.perf_counter() - t) / 10))
    with open(out_path, "w") as f:
        json.dump(samples, f)


def window(times, values, start, length):
    return values[bisect.bisect_left(times, start):bisect.bisect_left(times, start + length)]


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
    processes = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if seconds < 20 or processes < 1:
        sys.exit("usage: noise_floor.py [seconds >= 20] [processes >= 1]")
    try:
        import torch  # noqa: F401 (the workers' import, checked once here)
    except ImportError:
        sys.exit(f"{sys.executable} has no torch: run it with .venv/bin/python (make deps)")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [f"{tmp}/{p}.json" for p in range(processes)]
        workers = [subprocess.Popen([sys.executable, __file__, "--worker", str(seconds), p]) for p in paths]
        if any(w.wait() != 0 for w in workers):
            sys.exit("a worker failed")
        traces = [json.load(open(p)) for p in paths]

    print(f"{processes} processes, {seconds:.0f} s each, the same matrix product over and over\n")
    print("| process | 1 s medians: min | median | max | (max - min) / median |")
    print("|---|---|---|---|---|")
    for p, trace in enumerate(traces):
        times, values = [t for t, _ in trace], [v for _, v in trace]
        seconds_medians = [statistics.median(w) for s in range(int(seconds))
                           if (w := window(times, values, s, 1.0))]
        lo, mid, hi = min(seconds_medians), statistics.median(seconds_medians), max(seconds_medians)
        print(f"| {p} | {lo * 1e3:.3f} ms | {mid * 1e3:.3f} ms | {hi * 1e3:.3f} ms | {(hi - lo) / mid * 100:.0f}% |")

    print(f"\nA profile over a window, against a {RUN_SECONDS:.0f} s run starting {GAP_SECONDS:.0f} s after it "
          f"(2000 random moments per process):\n")
    print("| profile window | median abs error | within 5% | 90th percentile |")
    print("|---|---|---|---|")
    rng = random.Random(20261123)
    for length in PROFILE_WINDOWS:
        errors = []
        for trace in traces:
            times, values = [t for t, _ in trace], [v for _, v in trace]
            for _ in range(2000):
                t = rng.uniform(0, seconds - length - GAP_SECONDS - RUN_SECONDS)
                profile = window(times, values, t, length)
                run = window(times, values, t + length + GAP_SECONDS, RUN_SECONDS)
                if profile and run:
                    errors.append(abs(statistics.median(profile) / statistics.median(run) - 1))
        errors.sort()
        print(f"| {length:g} s | {statistics.median(errors) * 100:.1f}% | "
              f"{sum(e <= 0.05 for e in errors) / len(errors) * 100:.0f}% | "
              f"{errors[int(0.9 * len(errors))] * 100:.1f}% |")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(float(sys.argv[2]), sys.argv[3])
    else:
        main()
