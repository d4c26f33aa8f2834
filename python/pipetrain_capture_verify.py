"""The check before a captured file is written: the layers compute what the model's
forward() computes, in both modes, with every parameter's gradient."""
import contextlib
from typing import Optional, Sequence

import torch
from torch import nn

from pipetrain_capture_common import CaptureError, call, left_as_they_were, pick_output


def verify(model: nn.Module, scripted: torch.jit.ScriptModule, example, key: Optional[str],
           left_out: Sequence[str] = ()):
    """The captured layers compute what forward() computes: the output in evaluation and in
    training mode, and in training mode every parameter's gradient. Run on the model and
    the layers themselves, which share their parameters (no copy of a billion weights):
    both are left as they were, buffers (batch norm's statistics) and gradients alike.
    `example`: one tensor, or named inputs (a dict) in forward()'s order.
    `left_out`: the modules the capture left out (their results never reach the output);
    they draw their random numbers aside, as the layers, which lack them, draw none."""
    # Unoptimized, as pipetrain runs the layers (loadScriptedModel): TorchScript's optimizing
    # executor recompiles a graph after its first runs, and the recompiled T5 drew its
    # dropout masks unlike the first runs and unlike forward().
    with torch.jit.optimized_execution(False), left_as_they_were(model, scripted), _drawing_aside(model, left_out):
        _compare(model, scripted, example, key)


def _compare(eager: nn.Module, layers: torch.jit.ScriptModule, example, key: Optional[str]):
    names = {k: v.split(",")[0] for k, v in dict(layers.pipetrain_state_dict).items()}
    for training in (False, True):
        eager.train(training)
        layers.train(training)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            want = pick_output(call(eager, example), key)
        with torch.random.fork_rng():
            torch.manual_seed(0)
            got = call(layers, example)
        if want.shape != got.shape or _relative_error(got, want) > 1e-4:
            why = ("" if training else "; torch.export traced forward() in training mode, so a branch on "
                   "`self.training` other than dropout's, batch norm's, recurrent layers' and stochastic depth's "
                   "follows the training branch: make the branch a dropout, or capture with `python/pipetrain_capture.py "
                   "capture ... --tracer fx` (which traces in evaluation mode and trains without the branch) and "
                   "train the file with --model-file; `train --model-py` traces with torch.export only")
            raise CaptureError(f"the captured layers do not reproduce forward() on the example input in "
                               f"{'training' if training else 'evaluation'} mode (relative error "
                               f"{_relative_error(got, want) if want.shape == got.shape else 'of shape'}){why}")
    if not want.is_floating_point():
        return
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    (want.float() * weights).sum().backward()
    eager_grads = {n: p.grad for n, p in eager.named_parameters()}
    for p in eager.parameters():  # the layers' own: they share the tensors
        p.grad = None
    (got.float() * weights).sum().backward()
    scale = _gradient_scale(eager_grads.values())
    for key_, p in layers.named_parameters():
        user = names.get(key_)
        if user is None or user not in eager_grads or eager_grads[user] is None:
            continue
        if p.grad is None or _relative_error(p.grad, eager_grads[user], scale) > 1e-3:
            error = _relative_error(p.grad, eager_grads[user], scale) if p.grad is not None else "none"
            raise CaptureError(f"the captured layers' gradient of '{user}' differs from forward()'s (relative error "
                               f"{error})")


@contextlib.contextmanager
def _drawing_aside(model: nn.Module, paths: Sequence[str]):
    """The modules at `paths` draw aside (draw_aside) while the block runs."""
    patched = [model.get_submodule(path) for path in paths]
    for module in patched:
        draw_aside(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # the class's own again


def draw_aside(module: nn.Module):
    """Runs `module` on a fork of the generator: its dropout draws leave the model's stream
    as it was, so the kept layers' masks are those the captured layers draw."""
    forward = module.forward

    def aside(*args, **kwargs):
        with torch.random.fork_rng():
            return forward(*args, **kwargs)
    module.forward = aside


def _gradient_scale(grads) -> float:
    """The model's typical gradient per element: the median over its parameters of each
    gradient's root mean square."""
    sizes = sorted(g.detach().float().norm().item() / max(1, g.numel()) ** 0.5 for g in grads if g is not None)
    return sizes[len(sizes) // 2] if sizes else 0.0


def _relative_error(got: torch.Tensor, want: torch.Tensor, scale: float = 0.0) -> float:
    """|got - want| / |want| in the 2-norm, where |want| counts at least 1e-3 per element's
    root (float noise of other kernels stays far below 1e-4, also where the true value is
    zero: attention's key bias has no gradient), and for a gradient at least a tenth of
    the model's typical gradient (`scale`) per element's root. A gradient that is zero in
    exact arithmetic is two roundings of zero in the model and in the layers: timm's
    EfficientNet's first block ends in a batch norm whose bias feeds, through a 1x1
    convolution, the next block's batch norm in training mode, which subtracts it again;
    that bias's gradient came out about 4 in both, against 8e4 for the model's typical
    gradient, and 1.03 apart. Against its own size that is a relative error of 1; against
    the model's it is 1e-5. A wrong gradient is still refused wherever its error exceeds
    1e-4 of the model's typical gradient (tests/ecosystem/capture_rules.py)."""
    # In single precision, whose norms sum pairwise: a billion-parameter model's embedding
    # gradient in double would take 2 GB more per copy.
    got, want = got.detach().float(), want.detach().float()
    floor = max(1e-3, 0.1 * scale) * max(1, want.numel()) ** 0.5
    return ((got - want).norm().item() / max(want.norm().item(), floor))
