#!/usr/bin/env python3
"""Bring your own model: a small PyTorch model and dataset of our own, saved the way
pipetrain reads them.

    .venv/bin/python examples/byo/make_model.py OUT_DIR

writes OUT_DIR/model.pt (a chain of layers), OUT_DIR/dag_model.pt (two branches and a
head) and OUT_DIR/data.pt (the tensors). Then (examples/byo/README.md):

    pipetrain train --model-file OUT_DIR/model.pt --data-file OUT_DIR/data.pt --nproc 2 --batch 64 --epochs 3

The task: points in 16 dimensions, labelled by which of four hidden directions they lie
closest to (a problem an MLP learns in a few epochs).
"""
import os
import sys
from typing import Dict, List

import torch
from torch import nn


def chain_model() -> nn.Module:
    # A scripted nn.Sequential is a chain: every child is one pipetrain layer.
    return nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(),
        nn.Linear(64, 64), nn.ReLU(),
        nn.Linear(64, 64), nn.ReLU(),
        nn.Linear(64, 4))


class TwoBranch(nn.Module):
    """A DAG of layers: two branches over the same input, concatenated by a head.

    `pipetrain_inputs` names each child's inputs ("input" is the model's input); the
    children run in the order they are registered, which must be a topological order.
    """
    pipetrain_inputs: Dict[str, List[str]]

    def __init__(self):
        super().__init__()
        self.wide = nn.Sequential(nn.Linear(16, 96), nn.Tanh())
        self.deep = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = Concat(96 + 32, 4)
        self.pipetrain_inputs = {"wide": ["input"], "deep": ["input"], "head": ["wide", "deep"]}

    def forward(self, x):
        return self.head(self.wide(x), self.deep(x))


class Concat(nn.Module):
    def __init__(self, width: int, classes: int):
        super().__init__()
        self.fc = nn.Linear(width, classes)

    def forward(self, a, b):
        return self.fc(torch.cat([a, b], dim=1))


def dataset(samples: int):
    g = torch.Generator().manual_seed(7)
    directions = torch.randn(4, 16, generator=g)
    x = torch.randn(samples, 16, generator=g)
    y = (x @ directions.t()).argmax(dim=1)
    return x, y


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(chain_model()).save(f"{out}/model.pt")
    torch.jit.script(TwoBranch()).save(f"{out}/dag_model.pt")
    x, y = dataset(4096)
    # The data file: inputs and labels, and optionally a held-out split
    # ("test_inputs", "test_labels"; without them every tenth sample is held out).
    torch.save({"inputs": x[:3584], "labels": y[:3584],
                "test_inputs": x[3584:], "test_labels": y[3584:]}, f"{out}/data.pt")


if __name__ == "__main__":
    main()
