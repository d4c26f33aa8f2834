#!/usr/bin/env python3
"""Data for the models in this folder, from two Debian packages, as torch.save files
pipetrain reads (docs/byo.md). Usage: make_data.py OUT_DIR

- fmnist_rgb.pt: Fashion-MNIST (dataset-fashion-mnist) as 3-channel 28 x 28 images,
  the grey channel repeated, for torchvision's ImageNet-shaped CNNs; 10 000 training
  and 2 000 test images.
- fortunes.pt: byte tokens of the fortunes package's texts, 32 per sample, each labelled
  with the next byte; 8 000 training and 1 000 test sequences."""
import glob
import gzip
import os
import sys

import numpy as np
import torch

FMNIST = "/usr/share/datasets/fashion-mnist"
FORTUNES = "/usr/share/games/fortunes"


def idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def fashion_mnist(split, count):
    prefix = "train" if split == "train" else "t10k"
    images = idx(f"{FMNIST}/{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[:count]
    labels = idx(f"{FMNIST}/{prefix}-labels-idx1-ubyte.gz", 8)[:count]
    x = torch.tensor(images, dtype=torch.float32).div(255).sub(0.2860).div(0.3530)  # the training set's mean and std
    return x.repeat(1, 3, 1, 1), torch.tensor(labels, dtype=torch.long)


def fortunes(context, train, test):
    text = b"".join(open(p, "rb").read() for p in sorted(glob.glob(f"{FORTUNES}/*"))
                    if not p.endswith(".dat") and not os.path.islink(p) and os.path.isfile(p))
    tokens = torch.tensor(np.frombuffer(text, dtype=np.uint8), dtype=torch.long)
    windows = tokens[: (train + test) * context + 1]
    x = windows[:-1].reshape(-1, context)
    y = windows[1:].reshape(-1, context)
    return x[:train], y[:train], x[train:], y[train:]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    x, y = fashion_mnist("train", 10000)
    xt, yt = fashion_mnist("test", 2000)
    torch.save({"inputs": x, "labels": y, "test_inputs": xt, "test_labels": yt}, f"{out}/fmnist_rgb.pt")
    x, y, xt, yt = fortunes(32, 8000, 1000)
    torch.save({"inputs": x, "labels": y, "test_inputs": xt, "test_labels": yt}, f"{out}/fortunes.pt")
    print(f"wrote {out}/fmnist_rgb.pt and {out}/fortunes.pt")


if __name__ == "__main__":
    main()
