#!/usr/bin/env python3
"""A PyTorch model as its author wrote it, as the TorchScript file pipetrain trains.

pipetrain places layers on pipeline stages: the top-level children of a TorchScript
module, wired by its `pipetrain_inputs` attribute (docs/byo.md). Models as people write
them do work in forward() between their children (flatten, residual adds, position
embeddings, masks and rotary tables computed from the input's length), loop over
ModuleLists, reuse activations, tie weights and return ModelOutputs. This tool traces
forward() with torch.export (pipetrain_capture_export.py: how it cuts), or with torch.fx
(`--tracer fx`), checks that the layers compute what forward() computes (outputs in both
modes, and gradients), and writes them as one TorchScript file:

- a layer is a module that is not a container; work between modules joins the layer that
  reads it; a tensor that several later layers read (a residual) is an edge of the DAG;
- values made from the input's length alone are recomputed in each layer that reads them;
- a weight used by two layers (tied embeddings) stays one tensor, which pipetrain keeps
  equal across stages by summing its gradients;
- `nn.ReLU(inplace=True)` and other modules' in-place flags are turned off, since a
  stage's input may not be modified in place.

The file's parameters keep the user's names (`pipetrain_state_dict` maps them), so the
trained weights go back into the original class:

    python3 python/pipetrain_capture.py capture 'examples/asis/gpt2.py:GPT(GPTConfig())' \\
        --data-file data.pt --out model.pt
    pipetrain train --model-file model.pt --data-file data.pt --export trained.pt
    python3 python/pipetrain_capture.py state-dict trained.pt --out state_dict.pt
    model.load_state_dict(torch.load("state_dict.pt"))

Or from Python: `capture(model, example_input, "model.pt")`, `state_dict("trained.pt")`.
"""
import argparse
import copy
import importlib
import importlib.util
import io
import itertools
import os
import sys
from typing import Dict, Optional, Union

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the tracers beside this file, when imported by path
from pipetrain_capture_common import CaptureError, no_inplace, where  # noqa: E402
from pipetrain_capture_export import ExportCapture  # noqa: E402
from pipetrain_capture_fx import FxCapture  # noqa: E402
from pipetrain_capture_verify import verify  # noqa: E402

TRACERS = ("export", "fx")


def capture(model: nn.Module, example: Union[torch.Tensor, Dict[str, torch.Tensor]], path: str = None,
            output: Optional[str] = None, tracer: str = "export") -> torch.jit.ScriptModule:
    """`model` (left untouched) as pipetrain's layers, checked against its forward() on
    `example`: one tensor, or named inputs matched to forward()'s arguments by name
    ({"input_ids": ..., "attention_mask": ...}), which the file then takes by name too.
    Saved to `path` when given. `output` names the tensor to train on where forward()
    returns several (a ModelOutput's "logits")."""
    # The modules copied, their parameters and buffers shared: a billion weights are not
    # copied to be checked (verify leaves them as they were), only once at the end.
    copied = copy.deepcopy(model, {id(t): t for t in itertools.chain(model.parameters(), model.buffers())})
    no_inplace(copied)
    if tracer == "fx":
        if output is not None:
            raise CaptureError("--output needs --tracer export")
        if isinstance(example, dict):
            raise CaptureError("named inputs need --tracer export")
        scripted = FxCapture(copied.eval(), example).build()
    else:
        config = getattr(copied, "config", None)
        if getattr(config, "use_cache", False):  # a Hugging Face model: training keeps no key-value cache
            config.use_cache = False
        _batched_experts(copied)
        cut = ExportCapture(copied.train(), example, output)  # traced in training mode: dropout and batch norm's flag
        scripted = cut.build()
        verify(copied, scripted, cut.example, cut.key, cut.left_out)
    scripted.train(model.training)
    # Weights of its own, so that training the layers leaves `model` as it is: the file
    # read back (a ScriptModule's deepcopy has parameters autograd does not reach).
    if path:
        scripted.save(path)
        return torch.jit.load(path)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    return torch.jit.load(buffer)


def _batched_experts(model: nn.Module):
    """Hugging Face's mixture-of-experts layers (Mixtral, Qwen2-MoE, ... in transformers 5)
    run their experts as `config._experts_implementation` says. Its "grouped_mm" calls
    transformers::grouped_mm_fallback on CPUs, an operator registered in Python whose
    implementation loops over the experts' token counts, so it can be neither loaded by
    LibTorch nor decomposed; "batched_mm" gathers each token's experts' weights and
    multiplies them in one batch, in torch's own operations. Said on stderr."""
    configs = {id(c): c for m in model.modules() if (c := getattr(m, "config", None)) is not None}
    switched = [c for c in configs.values() if getattr(c, "_experts_implementation", None) == "grouped_mm"]
    for config in switched:
        config._experts_implementation = "batched_mm"
    if switched:
        print("note: the mixture-of-experts layers run their experts as batched_mm (config._experts_implementation): "
              "grouped_mm calls an operator registered in Python, which LibTorch cannot load", file=sys.stderr)


def state_dict(trained_path: str) -> Dict[str, torch.Tensor]:
    """A file pipetrain exported (`train --export`), as the original model's state_dict:
    a tied weight under each of its names."""
    if not os.path.isfile(trained_path):
        raise CaptureError(f"{trained_path}: no such file")
    try:
        module = torch.jit.load(trained_path, map_location="cpu")
    except Exception as e:
        raise CaptureError(f"{trained_path} is not a TorchScript file (train --export writes one): {e}") from e
    if not hasattr(module, "pipetrain_state_dict"):
        raise CaptureError(f"{trained_path} was not captured by pipetrain_capture: its state_dict() holds its own names")
    names = dict(module.pipetrain_state_dict)
    trained = {user: v for k, v in module.state_dict().items() if k in names for user in names[k].split(",")}
    # What no layer holds (a left-out auxiliary head, a weight forward() never reads), as captured.
    untrained = dict(module.pipetrain_untrained) if hasattr(module, "pipetrain_untrained") else {}
    return {**untrained, **trained}


class _Namespace(dict):
    """A module's names for eval, including those a lazy module (transformers, timm's
    submodules) makes only when asked."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def __missing__(self, name):
        try:
            return getattr(self.module, name)
        except AttributeError:
            raise NameError(f"name '{name}' is not defined in {self.module.__name__}") from None


def load_model(spec: str) -> nn.Module:
    """'file.py:EXPR' or 'package.module:EXPR', EXPR evaluated in that module."""
    source, _, expr = spec.partition(":")
    if not expr:
        raise CaptureError(f"'{spec}': give MODULE:EXPRESSION, e.g. 'torchvision.models:resnet18(num_classes=10)'")
    try:
        if source.endswith(".py"):
            if not os.path.isfile(source):
                raise CaptureError(f"{source}: no such file")
            sys.path.insert(0, os.path.dirname(os.path.abspath(source)))
            loaded = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(source))[0], source)
            module = importlib.util.module_from_spec(loaded)
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(source)
    except CaptureError:
        raise
    except Exception as e:
        raise CaptureError(f"{source} cannot be loaded{where(e)}: {type(e).__name__}: {e}") from e
    try:
        model = eval(expr, dict(vars(module)), _Namespace(module))
    except SyntaxError as e:
        raise CaptureError(f"'{expr}' is not a Python expression: {e.msg}") from e
    except Exception as e:
        raise CaptureError(f"'{expr}' in {source} fails{where(e)}: {type(e).__name__}: {e}") from e
    if not isinstance(model, nn.Module):
        raise CaptureError(f"'{expr}' is a {type(model).__name__}, not an nn.Module")
    return model


def named_inputs(data: dict) -> list:
    """The keys of a data file's named inputs (docs/byo.md): where the file has no
    "inputs", every key but the labels and the test split's ("test_" keys)."""
    return [] if "inputs" in data else [k for k in data if k != "labels" and not k.startswith("test_")]


def example_inputs(data_file: str):
    """The data file's first three inputs, as pipetrain reads them (float64 as float32):
    one tensor, or a dict of its named inputs."""
    if not os.path.isfile(data_file):
        raise CaptureError(f"{data_file}: no such file")
    try:
        data = torch.load(data_file, weights_only=True)
    except Exception as e:
        raise CaptureError(f"{data_file} is not a torch.save file of tensors (docs/byo.md): {e}") from e
    names = named_inputs(data) if isinstance(data, dict) else []
    if not isinstance(data, dict) or not all(isinstance(data.get(k), torch.Tensor) for k in names or ["inputs"]):
        raise CaptureError(f"{data_file} holds no tensor under 'inputs' (docs/byo.md: {{'inputs': X, 'labels': Y}}, "
                           "or inputs by name: {'input_ids': X, 'attention_mask': M, 'labels': Y})")

    def first(x):
        return x[:3].float() if x.is_floating_point() else x[:3].long()
    return {k: first(data[k]) for k in names} if names else first(data["inputs"])


def _writable(path: str):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CaptureError(f"--out {path}: the folder {folder} does not exist")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("capture", help="write a model as pipetrain's TorchScript layers")
    c.add_argument("model", help="FILE.py:EXPRESSION or MODULE:EXPRESSION that makes the nn.Module")
    c.add_argument("--data-file", required=True, help="the data pipetrain will train on: its first inputs trace the model")
    c.add_argument("--seed", type=int, default=0, help="torch.manual_seed before the model is made (default 0)")
    c.add_argument("--output", help="the tensor to train on where forward() returns several: a ModelOutput's or "
                   "dict's key (logits), or a tuple's index (default: the first tensor, said when chosen)")
    c.add_argument("--tracer", choices=TRACERS, default="export",
                   help="torch.export (default), or torch.fx as before it")
    c.add_argument("--out", required=True)
    s = sub.add_parser("state-dict", help="turn a trained export back into the original model's state_dict")
    s.add_argument("trained")
    s.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        _writable(args.out)
        if args.command == "capture":
            example = example_inputs(args.data_file)
            torch.manual_seed(args.seed)
            model = load_model(args.model)
            scripted = capture(model, example, args.out, output=args.output, tracer=args.tracer)
            names = list(scripted.pipetrain_inputs.keys())
            print(f"wrote {args.out}: {len(names)} layers ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
        else:
            torch.save(state_dict(args.trained), args.out)
            print(f"wrote {args.out}: load it with model.load_state_dict(torch.load({args.out!r}))")
    except CaptureError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
