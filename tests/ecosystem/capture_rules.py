#!/usr/bin/env python3
"""The capture's rules for training-mode randomness, recurrent layers and its gradient
check, on small models of the kind each rule is for (docs/byo.md).
Usage: capture_rules.py"""
import os
import sys
import tempfile

import torch
from timm.layers import DropPath
from torch import nn
from torchvision.ops import StochasticDepth

sys.path.insert(0, f"{os.path.dirname(os.path.abspath(__file__))}/../../python")
import pipetrain_capture as pc  # noqa: E402
from pipetrain_capture_common import CaptureError  # noqa: E402
from pipetrain_capture_verify import verify  # noqa: E402


def refused(make, words):
    try:
        make()
    except CaptureError as e:
        assert words in str(e), f"refused, but not for {words!r}: {e}"
        return str(e)
    raise AssertionError(f"not refused ({words!r})")


class StochasticDepthNet(nn.Module):
    """A residual branch under stochastic depth: timm's DropPath or torchvision's."""

    def __init__(self, drop):
        super().__init__()
        self.branch, self.head, self.drop = nn.Linear(8, 8), nn.Linear(8, 3), drop

    def forward(self, x):
        return self.head(x + self.drop(self.branch(x)))


def stochastic_depth():
    x = torch.randn(64, 8)
    for drop in (DropPath(0.3), StochasticDepth(0.3, "row")):
        model = StochasticDepthNet(drop)
        layers = pc.capture(model, x)  # checks both modes against forward()
        layers.train()
        draws = []
        for seed in (0, 1):
            torch.manual_seed(seed)
            draws.append(layers(x))
        dropped = (draws[0] == model.head(x)).all(1)
        assert 0 < dropped.sum() < 64, f"{type(drop).__name__}: some samples' branches dropped, not all, not none"
        assert not torch.equal(draws[0], draws[1]), f"{type(drop).__name__}: each draw its own masks"
        layers.eval()
        state = torch.get_rng_state()
        assert torch.equal(layers(x), model.eval()(x)), f"{type(drop).__name__}: evaluation keeps every sample"
        assert torch.equal(torch.get_rng_state(), state), f"{type(drop).__name__}: evaluation draws nothing"
    print("stochastic depth: samples dropped in training, none in evaluation, which draws nothing")


class Recurrent(nn.Module):
    def __init__(self, kind, batch_first, bidirectional):
        super().__init__()
        self.embedding = nn.Embedding(50, 16)
        self.rnn = kind(16, 16, num_layers=2, dropout=0.3, batch_first=batch_first, bidirectional=bidirectional)
        self.batch_first = batch_first
        self.head = nn.Linear(32 if bidirectional else 16, 50)

    def forward(self, tokens):
        h = self.embedding(tokens if self.batch_first else tokens.t())
        y, _ = self.rnn(h)
        return self.head(y if self.batch_first else y.transpose(0, 1))


def recurrent():
    x = torch.randint(0, 50, (4, 9))
    for kind in (nn.LSTM, nn.GRU, nn.RNN):
        for batch_first in (True, False):
            for bidirectional in (False, True):
                model = Recurrent(kind, batch_first, bidirectional)
                layers = pc.capture(model, x)  # both modes, and the gradients
                assert dict(layers.pipetrain_inputs)["head"] == ["rnn"]
                layers.eval()
                assert torch.equal(layers(x), model.eval()(x))
    print("recurrent layers: LSTM, GRU and RNN with dropout, either layout, either direction, follow train()/eval()")

    class TimeFirstResult(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding, self.rnn = nn.Embedding(50, 16), nn.LSTM(16, 16)

        def forward(self, tokens):
            return self.rnn(self.embedding(tokens.t()))[0]

    refused(lambda: pc.capture(TimeFirstResult(), x), "pipetrain's loss reads them in dimension 0")


class AuxiliaryHead(nn.Module):
    """A multi-task result: the logits, and an auxiliary head's output with batch norm and
    dropout of its own, which draws before the main head's dropout."""

    def __init__(self):
        super().__init__()
        self.trunk, self.body, self.head = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)
        self.aux = nn.Sequential(nn.Linear(16, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.Linear(4, 3))
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        h = torch.relu(self.trunk(x))
        aux = self.aux(h)
        return {"logits": self.head(self.dropout(torch.relu(self.body(h)))), "aux": aux}


def auxiliary_head(tmp):
    x = torch.randn(6, 8)
    model = AuxiliaryHead()
    path = f"{tmp}/auxiliary.pt"
    layers = pc.capture(model, x, path, output="logits")  # checks the logits in both modes, and their gradients
    assert list(layers.pipetrain_inputs) == ["trunk", "body", "dropout", "head"], dict(layers.pipetrain_inputs)
    back = AuxiliaryHead()
    back.load_state_dict(pc.state_dict(path), strict=True)  # the left-out head's weights kept as they were
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), name
    print("an auxiliary head is left out, and its weights load back with the trained ones")


class TwoBranches(nn.Module):
    """`small`'s gradient is a thousandth of `big`'s."""

    def __init__(self, wrong=None):
        super().__init__()
        self.big, self.small = nn.Linear(8, 8), nn.Linear(8, 8)
        self.wrong = wrong

    def branch(self, module, x):
        y = module(x)
        if module is getattr(self, self.wrong or "", None):  # the same values, half as much gradient again
            y = y + 0.5 * (y - y.detach())
        return y

    def forward(self, x):
        return self.branch(self.big, x) + 1e-3 * self.branch(self.small, x)


def gradient_check():
    x = torch.randn(5, 8)
    torch.manual_seed(0)
    right = TwoBranches()
    layers = pc.capture(right, x)
    for wrong in ("big", "small"):
        eager = TwoBranches(wrong)
        eager.load_state_dict(right.state_dict())
        refused(lambda: verify(eager, layers, x, None), f"gradient of '{wrong}.weight' differs")
    print("the gradient check refuses a wrong gradient, a large one and one a thousandth of the model's")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        auxiliary_head(folder)
    stochastic_depth()
    recurrent()
    gradient_check()
