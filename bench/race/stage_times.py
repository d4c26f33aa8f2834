#!/usr/bin/env python3
"""Where a race's 1F1B step goes, per action: the forward and backward pass of each of the
race gpt's two stages (pieces 0-2 and 3-5, as race.py cuts it on 2 ranks), micro-batch 8,
one thread, timed alone in eager PyTorch (as the peer runs them) and in TorchScript (as
pipetrain's layers run), 7 alternating rounds of 10 timed passes after 3 untimed; prints
the medians. `--no-optimize` runs TorchScript with its graph optimizer off, as pipetrain
runs layer files (models::loadScriptedModel).

    .venv/bin/python bench/race/stage_times.py [--no-optimize]
"""
import argparse
import statistics
import time

import torch

import race_models


def timed(module, tokens, hidden, labels, first):
    """Seconds of one forward and of one backward pass of a stage."""
    t0 = time.perf_counter()
    out = module(tokens if first else hidden)
    if first:
        grad = torch.ones_like(out)
    else:
        out, grad = race_models.loss(out, labels), None
    t1 = time.perf_counter()
    out.backward(grad)
    return t1 - t0, time.perf_counter() - t1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--no-optimize", action="store_true", help="TorchScript's graph optimizer off")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch._C._set_graph_executor_optimize(not a.no_optimize)
    parts = [piece for _, piece in race_models.pieces("gpt", race_models.make("gpt"))]
    stages = {"stage 0": torch.nn.Sequential(*parts[:3]), "stage 1": torch.nn.Sequential(*parts[3:])}
    kinds = {"eager": stages, "TorchScript": {k: torch.jit.script(v) for k, v in stages.items()}}
    tokens, labels = torch.randint(0, 256, (8, 64)), torch.randint(0, 256, (8, 64))
    hidden = torch.randn(8, 64, 128, requires_grad=True)
    times = {}
    for _ in range(7):
        for kind, modules in kinds.items():
            for name, module in modules.items():
                for _ in range(3):
                    timed(module, tokens, hidden, labels, name == "stage 0")
                f, b = zip(*[timed(module, tokens, hidden, labels, name == "stage 0") for _ in range(10)])
                times.setdefault((kind, name), []).append((statistics.median(f), statistics.median(b)))
    for (kind, name), rounds in times.items():
        print(f"{kind:12} {name}: F {statistics.median(r[0] for r in rounds) * 1e3:.1f} ms, "
              f"B {statistics.median(r[1] for r in rounds) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
