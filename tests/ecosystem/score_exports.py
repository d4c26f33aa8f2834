#!/usr/bin/env python3
"""The families' exports loaded back into their own classes: each scores the test split as
pipetrain reported (accuracy within 2e-3, loss within 1e-3).
Usage: score_exports.py TMP_DIR, where TMP_DIR/exports.txt lists "NAME DATA RUN" per line,
and TMP_DIR holds DATA.pt, NAME-RUN.pt (the export) and NAME-RUN.json (the summary)."""
import json
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, f"{here}/../../python")
from families import inputs_of, make  # noqa: E402
from pipetrain_capture import state_dict  # noqa: E402

tmp = sys.argv[1]
failures, datasets = [], {}
for line in open(f"{tmp}/exports.txt"):
    name, data_file, r = line.split()
    if data_file not in datasets:  # one Python for every export: starting one with transformers costs seconds
        datasets[data_file] = torch.load(f"{tmp}/{data_file}.pt")
    data = datasets[data_file]
    labels = data["test_labels"]
    run = f"{tmp}/{name}-{r}"
    torch.manual_seed(0)
    model = make(name)
    model.load_state_dict(state_dict(f"{run}.pt"), strict=True)
    model.eval()
    args, kwargs = inputs_of(data, "test_")
    with torch.no_grad():
        out = model(*args, **kwargs)
    out = out if isinstance(out, torch.Tensor) else out.logits
    accuracy = (out.argmax(-1) == labels).float().mean().item()
    loss = F.cross_entropy(out.float().flatten(0, -2), labels.flatten()).item()
    summary = json.load(open(f"{run}.json"))
    print(f"{name} on {r} ranks: python accuracy {accuracy:.6f} loss {loss:.6f}; "
          f"pipetrain {summary['test_accuracy']:.6f} {summary['test_loss']:.6f}")
    if abs(accuracy - summary["test_accuracy"]) >= 2e-3 or abs(loss - summary["test_loss"]) >= 1e-3:
        failures.append(f"{name} on {r} ranks")
assert not failures, "scores differ: " + ", ".join(failures)
