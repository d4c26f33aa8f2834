#!/usr/bin/env python3
# An outside check of what a one-step gradient delay costs early in training (the
# 2BW rule, W(t+1) = W(t) - lr * grad f(W(t-1))), independent of pipetrain's code:
# a 784-256-10 MLP on Fashion-MNIST in plain PyTorch, 60 mini-batches of 256, trained
# synchronously and with the delayed gradient. Compare with
#   pipetrain train --model mlp --model-option input=784 --model-option layers=1 \
#     --model-option width=256 --dataset fashion-mnist --microbatches 8 --microbatch-size 32 \
#     --epochs 2 --max-steps 30 --nproc 2 --stage-bounds 0,1,2 --optimizer sgd --lr 0.02 \
#     --schedule 1f1b   (then --schedule 2bw)
# Needs the pinned torch of .venv (make deps): run it with .venv/bin/python. Usage: bench/delayed_sgd_check.py
import copy
import gzip

import numpy as np
import torch

torch.set_num_threads(2)
DIR = "/usr/share/datasets/fashion-mnist/"


def load(images, labels):
    x = np.frombuffer(gzip.open(DIR + images).read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32)
    y = np.frombuffer(gzip.open(DIR + labels).read(), np.uint8, offset=8).astype(np.int64)
    return torch.tensor((x / 255 - 0.2860) / 0.3530), torch.tensor(y)


X, Y = load("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
XT, YT = load("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")


def train(delay, optimizer, lr, steps=60, batch=256):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = (torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=lr))
    versions = [copy.deepcopy(model.state_dict())]
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(1))
    for k in range(steps):
        idx = order[k * batch:(k + 1) * batch]
        current = copy.deepcopy(model.state_dict())
        model.load_state_dict(versions[max(0, len(versions) - 1 - delay)])  # the weights the gradient is taken at
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(X[idx]), Y[idx]).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.load_state_dict(current)  # ... applied to the current weights
        for p, g in zip(model.parameters(), grads):
            p.grad = g
        opt.step()
        versions.append(copy.deepcopy(model.state_dict()))
    with torch.no_grad():
        return (model(XT).argmax(1) == YT).float().mean().item()


for optimizer, lr in [("sgd", 0.005), ("sgd", 0.02), ("adam", 1e-3)]:
    print(f"{optimizer} lr {lr}: test accuracy synchronous {train(0, optimizer, lr):.4f}, "
          f"one-step delay {train(1, optimizer, lr):.4f}")
