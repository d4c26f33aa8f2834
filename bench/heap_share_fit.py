#!/usr/bin/env python3
"""What a rank holds beyond its priced tensors and its data, fitted as a(model) + f x tensors
over the ranks of a bench/prediction_cases.py run (docs/predictions.md#the-runs-people-start):
the heap's share of a CPU rank's tensors (graph/heap_share.h: kTcmallocKeptShare from
-20261201s, whose ranks ran on tcmalloc; kGlibcKeptShare from -20261201p, on glibc).

Usage: .venv/bin/python bench/heap_share_fit.py bench/results/prediction-cases-20261201p.json
Needs a run recorded with each rank's predicted process bytes (since 2026-12-01, p on).
"""
import json
import sys

import numpy as np

MIB = 2 ** 20


def ranks(path):
    """(model, priced tensors MiB, held beyond them and the data MiB) for every rank."""
    for case in json.load(open(path)):
        model = case["case"].split(",")[0]
        for run in case["runs"]:
            if not run.get("process_predicted") or run["memory_predicted"][0] is None:
                continue
            for predicted, measured, process, data in zip(run["memory_predicted"], run["memory_measured"],
                                                          run["process_predicted"], run["data_bytes"]):
                tensors = (predicted - process) / MIB
                yield model, tensors, measured / MIB - tensors - max(0, data or 0) / MIB


def main(path):
    rows = list(ranks(path))
    models = sorted({m for m, _, _ in rows})
    x = np.array([[float(m == each) for each in models] + [t] for m, t, _ in rows])
    y = np.array([beyond for _, _, beyond in rows])
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    off = np.abs(y - x @ coef)
    print(f"{len(rows)} ranks: f = {coef[-1]:.2f} (pooled)")
    for i, model in enumerate(models):
        idx = [k for k, (m, _, _) in enumerate(rows) if m == model]
        t = np.array([rows[k][1] for k in idx])
        own = ""
        if t.max() - t.min() > 5:  # its own slope, where its ranks' tensors differ enough
            own = f", its own f {np.linalg.lstsq(np.vstack([np.ones_like(t), t]).T, y[idx], rcond=None)[0][1]:.2f}"
        print(f"  {model}: a = {coef[i]:.1f} MiB, {len(idx)} ranks, median {np.median(off[idx]):.1f} MiB off{own}")


if __name__ == "__main__":
    main(sys.argv[1])
