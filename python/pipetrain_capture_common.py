"""What both of pipetrain_capture's tracers share: the error a user can act on, where in
the user's code it arose, and the rule for which modules are layers."""
import contextlib
import inspect
import io
import logging
import os
import sys
import traceback
from typing import Optional

import torch
from torch import nn

CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)
INPUT = "input"


def input_key(name: Optional[str]) -> str:
    """How the file's wiring (`pipetrain_inputs`) names a model input: "input" for a model
    of one input, "input:NAME" for each of several named inputs (a data file holding
    `input_ids` and `attention_mask`), which no layer's name can be."""
    return INPUT if name is None else f"{INPUT}:{name}"


def call(module, example):
    """module on the example: one tensor, or named inputs (a dict) passed by name, which
    the user's forward() and the captured file's both take."""
    return module(**example) if isinstance(example, dict) else module(example)


def signature_order(model: nn.Module, example):
    """The example as forward() takes it: one tensor, or its named inputs in the order of
    forward()'s arguments. Refuses a forward() that needs an argument the data does not
    hold, and data holding a name forward() does not take."""
    params = list(inspect.signature(model.forward).parameters.values())
    required = [p.name for p in params
                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not isinstance(example, dict):
        if len(required) > 1:
            raise CaptureError(f"forward() takes {len(required)} inputs ({', '.join(required)}); pipetrain feeds "
                               "one tensor per sample unless the data file holds the inputs by name "
                               f"({{'{required[0]}': X, '{required[1]}': Y, ..., 'labels': Z}}, docs/byo.md); or "
                               "give the other arguments defaults")
        return example
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        unknown = [k for k in example if k not in named]
        if unknown:
            raise CaptureError(f"the data holds '{unknown[0]}', which forward() does not take (its arguments: "
                               f"{', '.join(named)}); rename the data's input, or leave it out")
    missing = [r for r in required if r not in example]
    if missing:
        raise CaptureError(f"forward() needs '{missing[0]}', which the data does not hold (it holds "
                           f"{', '.join(example)}); save it beside them, or give the argument a default")
    order = [n for n in named if n in example] + [k for k in example if k not in named]
    return {k: example[k] for k in order}


def describe(example) -> str:
    """The example's shape and dtype, per named input where there are several."""
    if isinstance(example, dict):
        return ", ".join(f"{k} {tuple(v.shape)} {v.dtype}" for k, v in example.items())
    return f"shape {tuple(example.shape)}, {example.dtype}"


class CaptureError(Exception):
    """The model cannot be taken as it is: says which module or operation, and what to change."""


def user_frame(error: BaseException):
    """The last frame of the error's traceback in the user's code (outside torch, outside
    this tool and outside the Python library), or None."""
    torch_dir = os.path.dirname(torch.__file__)
    here = os.path.dirname(os.path.abspath(__file__))
    stdlib = os.path.dirname(os.__file__)
    frames = []
    while error is not None:
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if not f.filename.startswith((torch_dir, here, stdlib)) and "<" not in f.filename] or frames
        error = error.__cause__ or error.__context__
    return frames[-1] if frames else None


def where(error: BaseException) -> str:
    """' at FILE:LINE (`code`)': the user's frame of the error."""
    frame = user_frame(error)
    return f" at {frame.filename}:{frame.lineno} (`{frame.line}`)" if frame else ""


def layer_name(unit: str) -> str:
    return unit.replace(".", "_").replace("@", "_call")


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def has_state(module: nn.Module) -> bool:
    """Whether a module holds parameters or buffers: one without (an activation, a pooling)
    computes the same wherever it is called."""
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _block_list(module: nn.Module) -> bool:
    """Whether module is a container of two or more blocks (modules with parts)."""
    return isinstance(module, CONTAINERS) and sum(1 for c in module.children() if any(True for _ in c.children())) >= 2


def big_block_holders(model: nn.Module, units) -> set:
    """The units that hold over a quarter of the model's parameters and, at any depth, a
    container of two or more blocks (a transformer's block list, in its encoder in its
    backbone): opening them, a level at a time, gives the planner blocks to balance."""
    total = max(1, parameter_count(model))
    out = set()
    for u in units:
        module = model.get_submodule(u)
        if parameter_count(module) * 4 > total and any(_block_list(m) for m in module.modules()):
            out.add(u)
    return out


def no_inplace(model: nn.Module):
    # A stage's first layer receives its input as a leaf that autograd must not see
    # modified; the out-of-place operation computes the same values.
    for m in model.modules():
        if getattr(m, "inplace", False) is True:
            m.inplace = False


def pick_output(out, key):
    """The tensor `key` names in forward()'s result (an index of a tuple, a key or attribute
    of a dict or ModelOutput, a named tuple's field), or the result itself when it is a
    tensor (torchvision's GoogLeNet returns its auxiliary outputs in training mode only)."""
    if key is None or isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        return out[key]
    if isinstance(out, (tuple, list)) and key.isdigit():
        return out[int(key)]
    return getattr(out, key)


def output_key(out, wanted: Optional[str]):
    """Which part of forward()'s result pipetrain trains on: the one the user named, else
    the first tensor (said on stderr), None when the result is a tensor."""
    if isinstance(out, torch.Tensor):
        if wanted is not None:
            raise CaptureError(f"--output {wanted}: forward() returns one tensor, not a structure to choose from")
        return None
    if isinstance(out, dict):
        items = list(out.items())
    elif isinstance(out, tuple) and hasattr(out, "_fields"):  # a named tuple
        items = [(f, getattr(out, f)) for f in out._fields]
    elif isinstance(out, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(out)]
    else:
        raise CaptureError(f"forward() returns a {type(out).__name__}; pipetrain needs a tensor, or a tuple, dict or "
                           "ModelOutput holding one")
    tensors = [k for k, v in items if isinstance(v, torch.Tensor)]
    if wanted is not None:
        if wanted not in tensors:
            raise CaptureError(f"--output {wanted}: forward() returns {type(out).__name__} with tensors "
                               f"{', '.join(tensors) or 'none'}")
        return wanted
    if not tensors:
        raise CaptureError(f"forward() returns a {type(out).__name__} with no tensor in it")
    others = (f"its first tensor, '{tensors[0]}' (--output, or train's --model-output, names another of "
              f"{', '.join(tensors)})") if len(tensors) > 1 else f"its one tensor, '{tensors[0]}'"
    print(f"note: forward() returns a {type(out).__name__}; training on {others}", file=sys.stderr)
    return tensors[0]


@contextlib.contextmanager
def quiet_torch_logs():
    """torch.export logs and prints the graph it gave up on; the CaptureError says what matters."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def left_as_they_were(*modules):
    """Puts back the modules' buffers (batch norm's statistics) and gradients, and their
    modes, when the block ends: what running them in training mode changes."""
    buffers = [(b, b.clone()) for m in modules for b in m.buffers()]
    grads = [(p, p.grad) for m in modules for p in m.parameters()]
    modes = [(m, m.training) for m in modules]
    for p, _ in grads:
        p.grad = None
    try:
        yield
    finally:
        with torch.no_grad():
            for b, kept in buffers:
                b.copy_(kept)
        for p, grad in grads:
            p.grad = grad
        for m, training in modes:
            m.train(training)
