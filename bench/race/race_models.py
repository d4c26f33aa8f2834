#!/usr/bin/env python3
"""The race's three models, written once in plain PyTorch, and their data.

Both racers train the very same file: pipetrain reads it with `--model-file` (its
top-level children are the layers), and torch.distributed.pipelining
(pipelining_peer.py) cuts the same children into the same stages. The models have the
zoo's shapes and defaults (docs/models.md), each zoo layer one child:

    mlp         fc0..fc7 (Linear 1024 + ReLU), head (Linear 10); input 1024
    gpt         embed (tokens + learned positions), block0..block3 (pre-LN causal
                attention and 4x GELU MLP), head (LayerNorm + Linear); width 128,
                4 heads, context 64, vocabulary 256
    fmnist-cnn  conv1, conv2 (conv 3x3 + ReLU + max-pool 2), flatten_fc1, fc2;
                images (1, 28, 28)

The data is random (the race measures speed; the cross-check compares parameters), of
`--samples` training samples and 8 test samples.

    race_models.py NAME OUT_DIR [--samples N] [--seed S]

writes OUT_DIR/NAME.pt (TorchScript) and OUT_DIR/NAME.data.pt (torch.save).
"""
import argparse
import math
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYERS = 8  # the mlp's hidden layers


def block(*modules):
    return nn.Sequential(*modules)


def mlp(width=1024, inputs=1024, classes=10):
    children = OrderedDict()
    for i in range(LAYERS):
        children[f"fc{i}"] = block(nn.Linear(inputs if i == 0 else width, width), nn.ReLU())
    children["head"] = nn.Linear(width, classes)
    return nn.Sequential(children)


class Embed(nn.Module):
    def __init__(self, vocab: int, context: int, width: int):
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        nn.init.normal_(self.token.weight, 0.0, 0.02)
        nn.init.normal_(self.position.weight, 0.0, 0.02)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.token(tokens) + self.position(positions)


def gpt_linear(n_in, n_out, std):
    linear = nn.Linear(n_in, n_out)
    nn.init.normal_(linear.weight, 0.0, std)
    nn.init.zeros_(linear.bias)
    return linear


class Block(nn.Module):
    """Pre-LN: causal multi-head attention, then a 4x GELU MLP, each with a residual."""

    def __init__(self, width: int, heads: int, layers: int):
        super().__init__()
        self.heads = heads
        residual_std = 0.02 / math.sqrt(2.0 * layers)  # GPT-2's scaled residual projections
        self.ln1 = nn.LayerNorm(width)
        self.qkv = gpt_linear(width, 3 * width, 0.02)
        self.proj = gpt_linear(width, width, residual_std)
        self.ln2 = nn.LayerNorm(width)
        self.fc = gpt_linear(width, 4 * width, 0.02)
        self.fc_proj = gpt_linear(4 * width, width, residual_std)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


def gpt(layers=4, width=128, heads=4, context=64, vocab=256):
    children = OrderedDict(embed=Embed(vocab, context, width))
    for i in range(layers):
        children[f"block{i}"] = Block(width, heads, layers)
    children["head"] = block(nn.LayerNorm(width), gpt_linear(width, vocab, 0.02))
    return nn.Sequential(children)


def fmnist_cnn(channels=32, hidden=128, classes=10):
    def conv(n_in, n_out):
        return block(nn.Conv2d(n_in, n_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    return nn.Sequential(OrderedDict(
        conv1=conv(1, channels), conv2=conv(channels, 2 * channels),
        flatten_fc1=block(nn.Flatten(), nn.Linear(2 * channels * 7 * 7, hidden), nn.ReLU()),
        fc2=nn.Linear(hidden, classes)))


MODELS = {"mlp": mlp, "gpt": gpt, "fmnist-cnn": fmnist_cnn}


def data(name, samples, generator):
    """Inputs and class labels of `samples` random samples shaped for model `name`."""
    if name == "mlp":
        return torch.randn(samples, 1024, generator=generator), torch.randint(0, 10, (samples,), generator=generator)
    if name == "gpt":
        tokens = torch.randint(0, 256, (samples, 65), generator=generator)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return torch.randn(samples, 1, 28, 28, generator=generator), torch.randint(0, 10, (samples,), generator=generator)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("out_dir")
    p.add_argument("--samples", type=int, default=4096, help="training samples")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.jit.script(MODELS[a.name]()).save(f"{a.out_dir}/{a.name}.pt")
    g = torch.Generator().manual_seed(a.seed + 1)
    x, y = data(a.name, a.samples, g)
    tx, ty = data(a.name, 8, g)
    # With a test split of its own, every training sample is trained on (none held out).
    torch.save({"inputs": x, "labels": y, "test_inputs": tx, "test_labels": ty}, f"{a.out_dir}/{a.name}.data.pt")


if __name__ == "__main__":
    main()
