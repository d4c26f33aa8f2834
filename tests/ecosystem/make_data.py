#!/usr/bin/env python3
"""The data the families train on: examples/asis/make_data.py's Fashion-MNIST in three
channels and fortunes' byte tokens, plus fortunes_classes.pt: the same token windows, each
labelled with one of 4 classes (how many of its bytes are spaces, in quartiles), for an
encoder with a classification head. Usage: make_data.py OUT_DIR"""
import os
import subprocess
import sys

import torch

out = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
subprocess.run([sys.executable, f"{here}/../../examples/asis/make_data.py", out], check=True, stdout=subprocess.DEVNULL)
tokens = torch.load(f"{out}/fortunes.pt")
spaces = (tokens["inputs"] == ord(" ")).sum(1).float()
edges = spaces.quantile(torch.tensor([0.25, 0.5, 0.75]))
test_spaces = (tokens["test_inputs"] == ord(" ")).sum(1).float()
torch.save({"inputs": tokens["inputs"], "labels": torch.bucketize(spaces, edges),
            "test_inputs": tokens["test_inputs"], "test_labels": torch.bucketize(test_spaces, edges)},
           f"{out}/fortunes_classes.pt")
print(f"wrote {out}/fmnist_rgb.pt, {out}/fortunes.pt and {out}/fortunes_classes.pt")
