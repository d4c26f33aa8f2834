"""Data as Python users hold it, as the file the ranks read (docs/byo.md, "The data").

Tensors in memory are written once into the cache, under the hash of their content, so
the same data is not written twice; a path is handed on as it is."""
import hashlib
import os

import torch

from ._binary import PipetrainError, cache_dir


def _tensors(data) -> dict:
    """{"inputs", "labels"[, "test_inputs", "test_labels"]} or inputs by name, from a
    dict, an (inputs, labels[, test_inputs, test_labels]) tuple or a TensorDataset."""
    if isinstance(data, torch.utils.data.TensorDataset):
        data = tuple(data.tensors)
    if isinstance(data, (tuple, list)):
        if len(data) not in (2, 4):
            raise PipetrainError(f"data as a tuple holds (inputs, labels) or (inputs, labels, test_inputs, test_labels), "
                                 f"not {len(data)} items")
        data = dict(zip(("inputs", "labels", "test_inputs", "test_labels"), data))
    if not isinstance(data, dict):
        raise PipetrainError(f"data is a {type(data).__name__}: give a dict or tuple of tensors, a TensorDataset, "
                             "a torch.save file or a token file (.bin)")
    for key, value in data.items():
        if not isinstance(value, torch.Tensor):
            raise PipetrainError(f"data['{key}'] is a {type(value).__name__}, not a tensor")
    if "labels" not in data:
        raise PipetrainError("data has no 'labels'")
    return data


def digest(tensors: dict) -> str:
    """A hash of the tensors' names, dtypes, shapes and bytes (a data dict, or a module's
    state_dict, whose 0-dim buffers such as BatchNorm's step count are bytes too)."""
    h = hashlib.sha256()
    for key in sorted(tensors):
        t = tensors[key].detach().cpu().contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def data_file(data) -> str:
    """The file the ranks read for `data`: a path as given (a torch.save file, or a token
    stream FILE.bin), else the tensors written into the cache's data/ folder."""
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if not os.path.isfile(path):
            raise PipetrainError(f"data file {path}: no such file")
        return path
    tensors = _tensors(data)
    folder = os.path.join(cache_dir(), "data")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, digest(tensors) + ".pt")
    if not os.path.isfile(path):
        partial = f"{path}.{os.getpid()}.partial"
        torch.save({k: v.detach().cpu() for k, v in tensors.items()}, partial)
        os.replace(partial, path)  # never a half-written file under the content's name
    return path
