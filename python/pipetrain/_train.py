"""pipetrain.train: a PyTorch model and its data in, trained on pipetrain's ranks, the
trained weights back in the same module."""
import dataclasses
import glob
import hashlib
import os
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

from . import _binary, _data
from ._binary import PipetrainError
from ._summary import Summary

_PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass
class Run:
    """What `train` returns: the typed summary, the folder the run wrote (summary JSON,
    report, the exported model) and the user's own module, now trained."""
    summary: Summary
    model: nn.Module
    directory: str
    report: str    # report.html
    exported: str  # the trained model as TorchScript (train --export)

    def __repr__(self):
        s = self.summary
        return (f"Run({s.model}: {s.plan.describe()}, {s.samples} samples at {s.samples_per_second:.1f}/s, "
                f"final loss {s.final_loss:.4f}, report {self.report})")


def _capture_tools():
    if _PYTHON_DIR not in sys.path:  # a checkout's python/; installed, the tools sit beside the package
        sys.path.insert(0, _PYTHON_DIR)
    import pipetrain_capture
    return pipetrain_capture


def _example(data_path: str, options: dict):
    """The inputs the capture traces: the data's first three, as the ranks read them."""
    if data_path.endswith(".bin"):
        context = options.get("context")
        if not context:
            raise PipetrainError("a token file (.bin) needs context=: the tokens per sample")
        dtype = np.uint32 if options.get("token_dtype") == "uint32" else np.uint16
        tokens = np.fromfile(data_path, dtype=dtype, count=3 * int(context))
        if tokens.size < 3 * int(context):
            raise PipetrainError(f"{data_path} holds fewer than 3 samples of {context} tokens")
        return torch.from_numpy(tokens.astype(np.int64)).view(3, int(context))
    try:
        return _capture_tools().example_inputs(data_path)
    except Exception as e:
        raise PipetrainError(str(e)) from e


def _model_key(model: nn.Module, example, output) -> str:
    """The capture's key: the module's class and structure, its weights, the example and
    the capture tool's own sources."""
    h = hashlib.sha256()
    h.update(f"{type(model).__module__}.{type(model).__qualname__}|{model!r}|{output}|{model.training}".encode())
    h.update(_data.digest(model.state_dict()).encode())
    h.update(_data.digest(example if isinstance(example, dict) else {"inputs": example}).encode())
    for tool in sorted(glob.glob(os.path.join(_PYTHON_DIR, "pipetrain_capture*.py"))):
        with open(tool, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def captured(model: nn.Module, data_path: str, output=None, options=None) -> str:
    """`model` captured (docs/byo.md) into the cache, once per model, data and tool."""
    example = _example(data_path, options or {})
    # A folder per key and the file named for the class: the runs, their reports and their
    # messages call the model by the file's name.
    folder = os.path.join(_binary.cache_dir(), "models", f"api-{_model_key(model, example, output)}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{type(model).__name__}.pt")
    if os.path.isfile(path):
        return path
    partial = f"{path}.{os.getpid()}.partial"
    try:
        _capture_tools().capture(model, example, partial, output=output)
    except Exception as e:
        raise PipetrainError(f"capturing {type(model).__name__}: {e}") from e
    os.replace(partial, path)
    return path


def train(model: nn.Module, data, *, nproc: int = 2, batch: int = None, epochs: int = 1, output: str = None,
          directory: str = None, progress: bool = True, **options) -> Run:
    """Trains `model` on `data` with pipetrain's ranks and loads the trained weights back
    into `model` (its own state_dict names; tied weights stay tied).

    model:  an nn.Module as you have it (captured with torch.export, docs/byo.md).
    data:   {"inputs": X, "labels": Y[, "test_inputs", "test_labels"]}, inputs by
            forward()'s argument names ({"input_ids", "attention_mask", "labels"}), an
            (inputs, labels) tuple or TensorDataset, a torch.save file, or a token file
            (.bin, with context=).
    nproc:  ranks; batch: samples per optimizer step (the planner splits them);
    output: the tensor to train on where forward() returns several ("logits").
    **options: any of `pipetrain train`'s options, by name: lr=3e-4, optimizer="adamw",
            schedule="1f1b", checkpoint_dir="ckpt", ... (pipetrain.train_options()
            lists them, as `pipetrain train --help` does);
            plan= a plan file, or a PlanChoice from pipetrain.plan.
    progress: print the console's progress lines as they come.
    """
    if not isinstance(model, nn.Module):
        raise PipetrainError(f"model is a {type(model).__name__}, not an nn.Module")
    for reserved in ("model_file", "data_file", "model_py", "export", "summary_json", "report"):
        if reserved in options:
            raise PipetrainError(f"{reserved}= is set by pipetrain.train itself")
    # The flags once, so that a misspelt keyword fails before any capture; a plan chosen
    # in Python (a PlanChoice) trains as its file, written into the run's folder below.
    plan = options.pop("plan", None)
    train_flags = _binary.flags({"nproc": nproc, "batch": batch, "epochs": epochs, **options},
                                _binary.train_options())
    data_path = _data.data_file(data)
    model_path = captured(model, data_path, output, options)
    if directory is None:
        runs = os.path.join(_binary.cache_dir(), "runs")
        os.makedirs(runs, exist_ok=True)
        directory = tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=runs)
    os.makedirs(directory, exist_ok=True)
    from ._planning import PlanChoice
    if isinstance(plan, PlanChoice):
        plan = plan.save(os.path.join(directory, "plan.json"))
    exported = os.path.join(directory, "trained.pt")
    summary_path = os.path.join(directory, "summary.json")
    report_dir = os.path.join(directory, "report")
    args = ["train", "--model-file", model_path, "--data-file", data_path, "--export", exported,
            "--summary-json", summary_path, "--report", report_dir]
    args += train_flags + (["--plan", str(plan)] if plan is not None else [])
    _binary.run(args, echo=progress)
    summary = Summary.read(summary_path)
    trained = _capture_tools().state_dict(exported)
    try:
        model.load_state_dict(trained, strict=True)
    except RuntimeError as e:
        raise PipetrainError(f"the trained weights do not load back into {type(model).__name__}: "
                             f"{str(e).splitlines()[0]}") from e
    return Run(summary, model, directory, os.path.join(report_dir, "report.html"), exported)
