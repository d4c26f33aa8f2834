"""The check before a captured file is written: the layers compute what the model's
forward() computes, in both modes, with every parameter's gradient."""
import copy
import io
from typing import Optional

import torch
from torch import nn

from pipetrain_capture_common import CaptureError, pick_output


def verify(model: nn.Module, scripted: torch.jit.ScriptModule, example: torch.Tensor, key: Optional[str]):
    """The captured layers compute what forward() computes: the output in evaluation and in
    training mode, and in training mode every parameter's gradient. Run on copies, so
    that neither the model nor the file's buffers (batch norm's statistics) change."""
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    layers = torch.jit.load(buffer)
    eager = copy.deepcopy(model)
    names = {k: v.split(",")[0] for k, v in dict(scripted.pipetrain_state_dict).items()}
    for training in (False, True):
        eager.train(training)
        layers.train(training)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            want = pick_output(eager(example), key)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            got = layers(example)
        if want.shape != got.shape or _relative_error(got, want) > 1e-4:
            why = ("" if training else "; torch.export traced forward() in training mode, so a branch on "
                   "`self.training` other than dropout's and batch norm's (stochastic depth, for example) follows "
                   "the training branch: make the branch a dropout, or capture with --tracer fx, which traces in "
                   "evaluation mode and trains without the branch")
            raise CaptureError(f"the captured layers do not reproduce forward() on the example input in "
                               f"{'training' if training else 'evaluation'} mode (relative error "
                               f"{_relative_error(got, want) if want.shape == got.shape else 'of shape'}){why}")
    if not want.is_floating_point():
        return
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    (want.float() * weights).sum().backward()
    (got.float() * weights).sum().backward()
    eager_grads = {n: p.grad for n, p in eager.named_parameters()}
    for key_, p in layers.named_parameters():
        user = names.get(key_)
        if user is None or user not in eager_grads or eager_grads[user] is None:
            continue
        if p.grad is None or _relative_error(p.grad, eager_grads[user]) > 1e-3:
            error = _relative_error(p.grad, eager_grads[user]) if p.grad is not None else "none"
            raise CaptureError(f"the captured layers' gradient of '{user}' differs from forward()'s (relative error "
                               f"{error})")


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """|got - want| / |want| in the 2-norm, where |want| counts at least 1e-3 per element's
    root: float noise of other kernels stays far below 1e-4, also where the true value is
    zero (attention's key bias has no gradient)."""
    got, want = got.detach().double(), want.detach().double()
    floor = 1e-3 * max(1, want.numel()) ** 0.5
    return ((got - want).norm() / want.norm().clamp_min(floor)).item()
