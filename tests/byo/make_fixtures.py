#!/usr/bin/python3
"""Test fixtures for bringing your own model: the example's files, plus models pipetrain
must refuse. Usage: make_fixtures.py SOURCE_DIR OUT_DIR"""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch import nn


class HiddenStep(nn.Module):
    """forward() does work outside its children: running the children in order differs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)) * 2.0)


class LoopedList(nn.Module):
    """A ModuleList looped over in forward(): a container child, no layer as it is."""

    def __init__(self):
        super().__init__()
        self.h = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for layer in self.h:
            x = layer(x)
        return self.head(x)


class MaskedEncoder(nn.Module):
    """Token ids and a padding mask, taken by name: every block and the head read the mask,
    so layers after the first read a model input (from the data, on whichever stage)."""

    def __init__(self, vocab=16, width=16, blocks=2, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(blocks)])
        self.head = nn.Linear(width, classes)

    def forward(self, input_ids, attention_mask):
        keep = attention_mask.unsqueeze(-1).float()
        h = self.embed(input_ids)
        for block in self.blocks:
            h = h + torch.tanh(block(h)) * keep
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


class BiasBlock(nn.Module):
    """Returns its hidden states and a bias made from its own weights, as T5's first block
    returns the position bias with them."""

    def __init__(self, width=16):
        super().__init__()
        self.mix = nn.Linear(width, width)
        self.bias = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.mix(x)), torch.sigmoid(self.bias(x))


class SharedBias(nn.Module):
    """Every later block reads the first block's second output: a layer with two outputs."""

    def __init__(self, width=16, blocks=2):
        super().__init__()
        self.first = BiasBlock(width)
        self.blocks = nn.ModuleList([nn.Linear(width, width) for _ in range(blocks)])
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        h, bias = self.first(x)
        for block in self.blocks:
            h = h + torch.tanh(block(h)) * bias
        return self.head(h)


class IdsOnly(nn.Module):
    def __init__(self, vocab=16, width=16, classes=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, classes)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids).mean(1))


def named(out, capture):
    """Inputs by name: the file lists the mask first, forward() takes the ids first."""
    torch.manual_seed(3)
    ids = torch.randint(0, 16, (160, 8))
    lengths = torch.randint(2, 9, (160, 1))
    mask = (torch.arange(8).unsqueeze(0) < lengths).long()
    torch.save({"attention_mask": mask, "input_ids": ids, "labels": torch.randint(0, 4, (160,))}, f"{out}/named.pt")
    capture(MaskedEncoder(), {"attention_mask": mask[:3], "input_ids": ids[:3]}, f"{out}/masked_encoder.pt")
    # One input, by name: its pack is the ids as fp32, which the first layer reads back as int64.
    torch.save({"input_ids": ids, "labels": torch.randint(0, 4, (160,))}, f"{out}/named_one.pt")
    capture(IdsOnly(), {"input_ids": ids[:3]}, f"{out}/ids_only.pt")


def captured(src, out):
    """Models as written, through python/pipetrain_capture.py: the GPT-2-style example
    (tied embeddings, positions from arange) before and after one SGD step of PyTorch's
    own, and a torchvision ResNet (flatten in forward, in-place ReLUs)."""
    sys.path[:0] = [f"{src}/python", f"{src}/examples/asis"]
    import torchvision
    from gpt2 import GPT, GPTConfig
    from pipetrain_capture import capture

    torch.manual_seed(2)
    tokens = torch.randint(0, 16, (64, 8))
    torch.save({"inputs": tokens, "labels": torch.randint(0, 16, (64, 8))}, f"{out}/tokens.pt")
    gpt = GPT(GPTConfig(block_size=8, vocab_size=16, n_layer=2, n_head=2, n_embd=16))
    capture(gpt, tokens[:3], f"{out}/gpt_tied.pt")
    labels = torch.load(f"{out}/tokens.pt")["labels"]
    sgd = torch.optim.SGD(gpt.parameters(), lr=0.05)  # one shared weight, stepped once
    F.cross_entropy(gpt(tokens[:8]).flatten(0, 1), labels[:8].flatten()).backward()
    sgd.step()
    capture(gpt, tokens[:3], f"{out}/gpt_tied_stepped.pt")

    images = torch.randn(64, 3, 16, 16)
    torch.save({"inputs": images, "labels": torch.randint(0, 4, (64,))}, f"{out}/images.pt")
    resnet = torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=4)
    capture(resnet, images[:3], f"{out}/resnet.pt")
    named(out, capture)
    torch.manual_seed(4)
    capture(SharedBias(), torch.load(f"{out}/data.pt")["inputs"][:3], f"{out}/shared_bias.pt")
    # Not captured: a ReLU(inplace=True) child that a stage may start with.
    torch.jit.script(nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 4))).save(
        f"{out}/inplace_chain.pt")


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    subprocess.run([sys.executable, f"{src}/examples/byo/make_model.py", out], check=True)
    torch.manual_seed(1)
    torch.jit.script(HiddenStep()).save(f"{out}/hidden_step.pt")
    torch.jit.script(LoopedList()).save(f"{out}/module_list.pt")
    with open(f"{out}/not_a_model.pt", "w") as f:
        f.write("this is not TorchScript\n")
    # What PyTorch users save instead of TorchScript: a state_dict, a pickled module.
    torch.save(HiddenStep().state_dict(), f"{out}/state_dict.pt")
    torch.save(HiddenStep(), f"{out}/pickled_module.pt")
    captured(src, out)


if __name__ == "__main__":
    main()
