#!/usr/bin/env python3
"""Each family's captured layers against its eager model in Python: the first step's loss
on real data and labels, and every parameter's gradient, within fp32 tolerance.
Usage: exactness.py DATA_DIR [FAMILY ...]"""
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, f"{here}/../../python")
import pipetrain_capture  # noqa: E402
from families import FAMILIES, NAMED, inputs_of, make  # noqa: E402
from pipetrain_capture_common import call, pick_output  # noqa: E402
from pipetrain_capture_verify import draw_aside  # noqa: E402


def loss_of(out, labels):
    return F.cross_entropy(out.float().flatten(0, -2), labels.flatten())


def check(name, data_dir):
    data = torch.load(f"{data_dir}/{({**FAMILIES, **NAMED})[name][1]}.pt")
    args, kwargs = inputs_of(data)

    def rows(n):  # the first n samples: one tensor, or inputs by name
        return args[0][:n] if args else {k: v[:n] for k, v in kwargs.items()}
    x, labels = rows(8), data["labels"][:8]
    torch.manual_seed(0)
    model = make(name)
    if getattr(getattr(model, "config", None), "use_cache", False):
        model.config.use_cache = False
    layers = pipetrain_capture.capture(model, rows(3))
    model.train()
    layers.train()
    # Modules the capture left out (their results never reach the output: an auxiliary
    # head) draw their dropout aside, as the layers, which lack them, draw none.
    untrained = set(dict(layers.pipetrain_untrained)) if hasattr(layers, "pipetrain_untrained") else set()
    for path, module in model.named_modules():
        names = [f"{path}.{n}" for n, _ in module.named_parameters()]
        if path and names and all(n in untrained for n in names):
            draw_aside(module)
    # Dropout draws from the generator in the same order in both, so seed both alike.
    torch.manual_seed(1)
    out = call(model, x)
    key = None if isinstance(out, torch.Tensor) else "logits"
    want = loss_of(pick_output(out, key), labels)
    want.backward()
    torch.manual_seed(1)
    with torch.jit.optimized_execution(False):  # as pipetrain runs them (pipetrain_capture_verify.py)
        got = loss_of(call(layers, x), labels)
    got.backward()
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), f"{name}: loss {got.item()} against {want.item()}"
    names = dict(layers.pipetrain_state_dict)
    grads = {n: p.grad for n, p in model.named_parameters(remove_duplicate=False)}  # a tied weight under each name
    checked = 0
    for key_, p in layers.named_parameters():
        user = names[key_].split(",")[0]
        g = grads[user]
        assert p.grad is not None and g is not None, f"{name}: no gradient for {user}"
        assert torch.allclose(p.grad, g, rtol=1e-4, atol=1e-5), \
            f"{name}: gradient of {user} differs by {(p.grad - g).abs().max().item():.3g}"
        checked += 1
    total = len([n for n, _ in model.named_parameters() if n not in untrained])
    assert checked == total, f"{name}: {checked} of {total} compared"
    print(f"{name}: loss {got.item():.6f} as eager, {checked} parameters' gradients equal")


if __name__ == "__main__":
    for family in sys.argv[2:] or FAMILIES:
        check(family, sys.argv[1])
