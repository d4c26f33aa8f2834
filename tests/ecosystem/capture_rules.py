#!/usr/bin/env python3
"""The capture's rules for training-mode randomness, recurrent layers, work the output never
reads, operators registered in Python and its gradient check, on small models of the kind
each rule is for (docs/byo.md). Usage: capture_rules.py OUT_DIR (it leaves python_op.pt
there: TorchScript calling an operator LibTorch lacks, for train's loader to refuse)."""
import os
import sys

import torch
from timm.layers import DropPath
from torch import nn
from torchvision.ops import StochasticDepth

sys.path.insert(0, f"{os.path.dirname(os.path.abspath(__file__))}/../../python")
import pipetrain_capture as pc  # noqa: E402
from pipetrain_capture_common import CaptureError  # noqa: E402
from pipetrain_capture_ops import check_loadable  # noqa: E402
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
    before = {k: v.clone() for k, v in model.state_dict().items()}
    layers = pc.capture(model, x, path, output="logits")  # checks the logits in both modes, and their gradients
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "the capture changed the model"
    assert all(p.grad is None for p in model.parameters()), "the capture left gradients on the model"
    assert list(layers.pipetrain_inputs) == ["trunk", "body", "dropout", "head"], dict(layers.pipetrain_inputs)
    back = AuxiliaryHead()
    back.load_state_dict(pc.state_dict(path), strict=True)  # the left-out head's weights kept as they were
    for (name, a), b in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), name
    print("an auxiliary head is left out, and its weights load back with the trained ones")


@torch.library.custom_op("pipetrain_test::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.tanh(x) * scale


scaled_tanh.register_fake(lambda x, scale: torch.empty_like(x))
scaled_tanh.register_autograd(lambda ctx, grad: (grad * ctx.scale * (1 - ctx.y ** 2), None),
                              setup_context=lambda ctx, inputs, output: setattr(ctx, "scale", inputs[1]) or
                              setattr(ctx, "y", torch.tanh(inputs[0])))
_library = torch.library.Library("pipetrain_test", "FRAGMENT")
_library.define("soft_sign(Tensor x) -> Tensor")
_library.impl("soft_sign", lambda x: x / (1 + x.abs()), "CompositeImplicitAutograd")


@torch.library.custom_op("pipetrain_test::by_counts", mutates_args=())
def by_counts(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Rows scaled group by group, the groups' sizes read from a tensor: a loop over data."""
    out, start = torch.zeros_like(x), 0
    for i, end in enumerate(counts.cumsum(0).tolist()):
        out[start:end] = x[start:end] * (i + 1)
        start = end
    return out


by_counts.register_fake(lambda x, counts: torch.empty_like(x))


class CustomActivation(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, h):
        if self.op == "custom_op":
            return torch.ops.pipetrain_test.scaled_tanh(h, 2.0)
        if self.op == "composite":
            return torch.ops.pipetrain_test.soft_sign(h)
        return torch.ops.pipetrain_test.by_counts(h, (h[:, 0] > 0).long().bincount(minlength=2))


class CustomOps(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.a, self.activation, self.b = nn.Linear(8, 8), CustomActivation(op), nn.Linear(8, 3)

    def forward(self, x):
        return self.b(self.activation(self.a(x)))


def custom_operators(tmp):
    x = torch.randn(6, 8)
    for op in ("custom_op", "composite"):  # traced through, or its CompositeImplicit kernel
        layers = pc.capture(CustomOps(op), x, f"{tmp}/{op}.pt")  # the check: outputs and gradients
        code = "\n".join(str(m.inlined_graph) for m in layers.children())
        assert "pipetrain_test::" not in code, f"{op}: the operator is still called"
    refused(lambda: pc.capture(CustomOps("loop"), x), "forward() calls pipetrain_test::by_counts in module 'activation'")
    # The check before a file is written; and a file written without it, for train's loader.
    calls = torch.jit.script(CustomActivation("custom_op"))
    refused(lambda: check_loadable(calls), "pipetrain_test::scaled_tanh, pipetrain_test::soft_sign, registered in Python")
    calls.save(f"{tmp}/python_op.pt")
    print("operators registered in Python: decomposed into ATen's where they can be, refused naming the module")


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
    auxiliary_head(sys.argv[1])
    custom_operators(sys.argv[1])
    stochastic_depth()
    recurrent()
    gradient_check()
