#!/usr/bin/python3
"""Test fixtures for bringing your own model: the example's files, plus models pipetrain
must refuse. Usage: make_fixtures.py SOURCE_DIR OUT_DIR"""
import os
import subprocess
import sys

import torch
from torch import nn


class HiddenStep(nn.Module):
    """forward() does work outside its children: running the children in order differs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * 2.0)


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    subprocess.run([sys.executable, f"{src}/examples/byo/make_model.py", out], check=True)
    torch.manual_seed(1)
    torch.jit.script(HiddenStep()).save(f"{out}/hidden_step.pt")
    with open(f"{out}/not_a_model.pt", "w") as f:
        f.write("this is not TorchScript\n")
    # What PyTorch users save instead of TorchScript: a state_dict, a pickled module.
    torch.save(HiddenStep().state_dict(), f"{out}/state_dict.pt")
    torch.save(HiddenStep(), f"{out}/pickled_module.pt")


if __name__ == "__main__":
    main()
