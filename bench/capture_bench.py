#!/usr/bin/env python3
"""The capture, measured: how long python/pipetrain_capture.py takes on each test family
(tests/ecosystem/families.py) and on the models-as-written examples, and whether layers
cut from torch.export's ATen graph train as fast as the torch.fx tracer's, where both
tracers take the model (torchvision's resnet18, examples/asis/gpt2.py).

Speed is compared as runs alternate: each round trains both captures with the same plan
(`--stage-bounds`, 2 ranks, 1F1B) in a random order, and the ratio export / fx of the
samples/s is taken per round; the median and the range are printed.

Usage: capture_bench.py BUILD_DIR [ROUNDS]   (default 7 rounds; about 1 minute a round)"""
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, f"{root}/python")
sys.path.insert(0, f"{root}/tests/ecosystem")
sys.path.insert(0, f"{root}/examples/asis")

import torch  # noqa: E402
import torchvision  # noqa: E402

import pipetrain_capture  # noqa: E402
from families import FAMILIES, make  # noqa: E402
from gpt2 import GPT, GPTConfig  # noqa: E402


def capture_seconds(out):
    rows = []
    for name, (_, data) in FAMILIES.items():
        x = torch.load(f"{out}/{data}.pt")["inputs"][:3]
        torch.manual_seed(0)
        model = make(name)
        start = time.perf_counter()
        pipetrain_capture.capture(model, x)
        rows.append((name, time.perf_counter() - start))
    return rows


def train(build, model, data, bounds, out):
    summary = f"{out}.json"
    subprocess.run([f"{build}/pipetrain", "train", "--model-file", model, "--data-file", data, "--nproc", "2",
                    "--schedule", "1f1b", "--stage-bounds", bounds, "--microbatches", "4", "--microbatch-size", "8",
                    "--epochs", "1", "--max-steps", "30", "--no-eval", "--summary-json", summary],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.load(open(summary))["throughput"]


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    out = tempfile.mkdtemp()
    subprocess.run([sys.executable, f"{root}/tests/ecosystem/make_data.py", out], check=True, stdout=subprocess.DEVNULL)
    print("capture seconds (torch.export, checks included):")
    for name, seconds in capture_seconds(out):
        print(f"  {name:14s} {seconds:5.1f} s")
    models = {"resnet18": (torchvision.models.resnet18(num_classes=10), "fmnist_rgb", "0,7,14"),
              "asis-gpt2": (GPT(GPTConfig()), "fortunes", "0,5,9")}
    print(f"samples/s, export-captured / fx-captured, 2 ranks 1F1B, {rounds} alternating rounds:")
    for name, (model, data, bounds) in models.items():
        x = torch.load(f"{out}/{data}.pt")["inputs"][:3]
        files = {}
        for tracer in ("export", "fx"):
            files[tracer] = f"{out}/{name}-{tracer}.pt"
            pipetrain_capture.capture(model, x, files[tracer], tracer=tracer)
        ratios = []
        for _ in range(rounds):
            speed = {}
            for tracer in random.sample(["export", "fx"], 2):
                speed[tracer] = train(build, files[tracer], f"{out}/{data}.pt", bounds, f"{out}/{name}-{tracer}")
            ratios.append(speed["export"] / speed["fx"])
        print(f"  {name:10s} median {statistics.median(ratios):.3f}x  range {min(ratios):.3f}-{max(ratios):.3f}  "
              f"({', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
