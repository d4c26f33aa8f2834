"""Cutting a model into pipetrain's layers through torch.export (the default tracer).

torch.export traces forward() as Python runs it (non-strict), so models written the way
Hugging Face, timm and reference code write them get in: rotary tables made with complex
numbers, masks built from the input's length, inputs with defaults, ModelOutput returns.
Every ATen node of the exported graph keeps the module it ran in (`nn_module_stack`), and
the graph is cut at those module boundaries:

- a layer is a module that is not a container (a top-level child, or an item of a
  ModuleList, ModuleDict or Sequential, however deeply those nest); a module holding over
  a quarter of the parameters and a list of blocks is opened into its blocks;
- a module with state called at several places is one layer per call (their weights are
  tied); one without state (an activation, a pooling) is work between layers;
- work between layers joins the layer that reads its result. Where several layers read it
  (a residual add written in forward()), it joins the latest layer it reads, whose output
  it becomes, and the others receive it as an edge of the layer DAG (a skip connection);
- values that do not depend on the data (a rotary table, a causal mask, positions) are
  recomputed in every layer that reads them, never sent; sizes are taken from the layer's
  own batch-first input, so the layers run at any micro-batch size;
- the training flag of dropout and batch norm follows the layer's `training`, and factory
  calls create their tensors on the layer's input's device.

Each layer is a TorchScript module compiled from its ATen nodes."""
import operator
import re
import sys
import warnings
from typing import Dict, List, Optional

import torch
import torch.fx
from torch import nn
from torch.export import Dim

from pipetrain_capture_ops import check_loadable, decompose_custom_ops, follow_training
from pipetrain_capture_regions import inline_grad_regions
from pipetrain_capture_unread import leave_out_unread
from pipetrain_capture_common import (CONTAINERS, INPUT, CaptureError, big_block_holders, call, describe, has_state,
                                      input_key, layer_name, left_as_they_were, output_key, pick_output,
                                      quiet_torch_logs, signature_order, where)

# Checks torch.export adds to the graph; pipetrain's layers check shapes themselves.
_DROPPED = ("aten._assert", "aten.sym_constrain_range")
_ROOT = "model"  # the user's model inside _Selected


class _Selected(nn.Module):
    """The user's model with its result narrowed to the one tensor pipetrain trains on,
    taking its inputs in order: one, or the named inputs `names` (passed by name)."""

    def __init__(self, model: nn.Module, key: Optional[str], names: Optional[List[str]]):
        super().__init__()
        self.model = model
        self.key = key
        self.names = names

    def forward(self, *inputs):
        if self.names is None:
            return pick_output(self.model(inputs[0]), self.key)
        return pick_output(self.model(**dict(zip(self.names, inputs))), self.key)


def _explain(error: Exception) -> str:
    """Why torch.export could not trace forward(), in the user's terms: the line, the
    construct and what to change."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    at = where(error)
    if "data-dependent" in text or "GuardOnDataDependent" in type(error).__name__ or "data dependent" in text:
        return (f"forward() branches on a tensor's values{at}; pipetrain needs one graph for every batch: compute "
                "the condition from the module's configuration, or use torch.where")
    if isinstance(error, TypeError) and "positional argument" in text:
        return (f"forward() needs more than one input ({first}); pipetrain feeds one tensor per sample unless the "
                "data file holds the inputs by name (docs/byo.md): give the other arguments defaults, or save them")
    if "Constraints violated" in text or "specializ" in text:
        return (f"forward() fixes the batch size{at}: its graph must run at any number of samples; take sizes from "
                "x.shape instead of constants")
    return f"torch.export cannot trace forward(){at}: {type(error).__name__}: {first}"


def _source_line(n: torch.fx.Node) -> str:
    """' (FILE:LINE `code`)' where the user's forward() made node n, from export's record."""
    trace = n.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in \w+\n\s+(.*)', trace)
    mine = [f for f in frames if "/torch/" not in f[0] and "pipetrain_capture" not in f[0]]
    return f" ({mine[-1][0]}:{mine[-1][1]} `{mine[-1][2].strip()}`)" if mine else ""


def _set_attribute(root: nn.Module, dotted: str, value):
    *parents, last = dotted.split(".")
    module = root
    for part in parents:
        if not hasattr(module, part):
            module.add_module(part, nn.Module())
        module = getattr(module, part)
    if isinstance(value, nn.Parameter):
        module.register_parameter(last, value)
    else:  # a buffer or a constant: a buffer of the layer, so that it moves with it to a device
        module.register_buffer(last, value.detach().clone())


class ExportCapture:
    def __init__(self, model: nn.Module, example, output: Optional[str] = None):
        """`example`: one tensor, or a dict of named inputs."""
        self.model = model
        self.example = example = signature_order(model, example)
        self.names = list(example) if isinstance(example, dict) else None
        inputs = tuple(example.values()) if self.names else (example,)
        # A look at what forward() returns, in training mode as it is traced: its updates of
        # the buffers (batch norm's statistics) are undone, so the file holds the model's own.
        with torch.no_grad(), left_as_they_were(model):
            try:
                eager = call(model, example)
            except Exception as e:
                raise CaptureError(f"forward() fails on the data's first inputs ({describe(example)}){where(e)}: "
                                   f"{type(e).__name__}: {e}") from e
        self.key = output_key(eager, output)
        # Named inputs share one batch dimension, which torch.export would not know.
        batch = Dim("batch") if self.names else Dim.AUTO
        try:
            with warnings.catch_warnings(), quiet_torch_logs():
                warnings.simplefilter("ignore")
                program = torch.export.export(_Selected(model, self.key, self.names), inputs,
                                              dynamic_shapes=(tuple({0: batch} for _ in inputs),), strict=False)
        except Exception as e:
            raise CaptureError(_explain(e)) from e
        program = decompose_custom_ops(program, self._where_called)
        self.gm = program.module()
        inline_grad_regions(self.gm)
        for n in reversed(list(self.gm.graph.nodes)):  # out of the graph, so that what only they read can go
            if self._dropped(n) and not n.users:
                self.gm.graph.erase_node(n)
        self.nodes = [n for n in self.gm.graph.nodes if not self._dropped(n)]
        self.input_nodes = [n for n in self.nodes if n.op == "placeholder"]
        self.input = self.input_nodes[0]
        kept = set(self.nodes)
        for node, name in zip(self.input_nodes, self.names or []):  # taken by **kwargs, say, and dropped
            if not any(user in kept for user in node.users):
                raise CaptureError(f"the data holds '{name}', which forward() does not take (it never reads it); "
                                   "leave it out of the data")
        self.batch = self.input.meta["val"].shape[0]
        if not isinstance(self.batch, torch.SymInt):
            raise CaptureError(f"forward() only runs at a batch of {self.batch} samples (torch.export fixed the batch "
                               "size): take sizes from x.shape instead of constants")
        self.open_modules = set()
        # Every name of each parameter in the user's model: tied weights have several.
        by_tensor: Dict[int, List[str]] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            by_tensor.setdefault(id(p), []).append(name)
        self.names_of = {name: names for names in by_tensor.values() for name in names}
        self.nodes, self.left_out = leave_out_unread(self.gm, self.nodes, lambda n: (self._stack(n) or [(None,)])[-1][0],
                                                     self.names_of, self.model, self.key, _ROOT)

    # --- the exported graph ------------------------------------------------------------

    @staticmethod
    def _dropped(n) -> bool:
        return ((n.op == "call_function" and str(n.target).startswith(_DROPPED)) or
                (n.op == "call_module" and n.target == "_guards_fn"))

    def attribute(self, n):
        return self.gm.get_parameter(n.target) if self.is_parameter(n) else _get(self.gm, n.target)

    def is_parameter(self, n) -> bool:
        try:
            self.gm.get_parameter(n.target)
            return True
        except AttributeError:
            return False

    def value(self, n):
        return _get(self.gm, n.target) if n.op == "get_attr" else n.meta.get("val")

    def is_tensor(self, n) -> bool:
        return isinstance(self.value(n), torch.Tensor)

    def batch_dim(self, n) -> Optional[int]:
        """The dimension of n's value that runs over the samples; None for a value the same
        for every sample. Layers exchange tensors batch-first: a layer whose result has
        its samples elsewhere (a recurrent layer's or nn.Transformer's (T, N, ...) without
        batch_first) moves them to the front, and its readers move them back."""
        v = self.value(n)
        if not isinstance(v, torch.Tensor):
            return None
        return next((d for d, size in enumerate(v.shape) if str(size) == str(self.batch)), None)

    def is_batch_size(self, n) -> bool:
        """A size read that is the batch: the layer takes it from its own batch-first input."""
        return (n.op == "call_function" and str(n.target) == "aten.sym_size.int" and
                str(n.meta.get("val")) == str(self.batch))

    # --- which layer each node belongs to ------------------------------------------------

    def constants(self) -> Dict[torch.fx.Node, bool]:
        """Whether each node's value is the same for any data: made from buffers, constants
        and the batch size alone, not from the input or a parameter."""
        constant = {}
        for n in self.nodes:
            if n.op == "get_attr":
                constant[n] = not self.is_parameter(n)
            elif n.op == "call_function":
                constant[n] = self.is_batch_size(n) or all(constant[a] for a in n.all_input_nodes)
            else:
                constant[n] = False
        return constant

    @classmethod
    def _where_called(cls, n) -> str:
        """' in module M (FILE:LINE `code`)': where forward() made node n."""
        stack = cls._stack(n)
        return (f" in module '{stack[-1][0]}'" if stack else "") + _source_line(n)

    @staticmethod
    def _stack(n):
        """[(path in the user's model, call index)] of the modules n ran in, outermost first."""
        out = []
        for key, (path, _) in (n.meta.get("nn_module_stack") or {}).items():
            if path == _ROOT or not path.startswith(_ROOT + "."):
                continue
            call = re.search(r"@(\d+)$", key)
            out.append((path[len(_ROOT) + 1:], int(call.group(1)) if call else 0))
        return out

    def opened(self, module: nn.Module, path: str) -> bool:
        return not path or isinstance(module, CONTAINERS) or path in self.open_modules

    def unit_of_path(self, path: str) -> Optional[str]:
        """The shortest prefix of path that is not opened, None for the model's own work."""
        prefix = []
        module = self.model
        for part in path.split(".") if path else []:
            if not self.opened(module, ".".join(prefix)):
                return ".".join(prefix)
            module = getattr(module, part)
            prefix.append(part)
        return None if self.opened(module, ".".join(prefix)) else ".".join(prefix)

    def module_units(self) -> Dict[torch.fx.Node, str]:
        """The nodes that run inside a layer's module, with their layer: 'path', or
        'path@k' for the k-th call of a module with state called at several places."""
        found = {}
        calls: Dict[str, set] = {}
        for n in self.nodes:
            stack = self._stack(n)
            if n.op != "call_function" or not stack:
                continue
            unit = self.unit_of_path(stack[-1][0])
            if unit is None:
                continue
            call = next((c for p, c in stack if p == unit), 0)
            found[n] = (unit, call)
            calls.setdefault(unit, set()).add(call)
        # Not layers: a module without state called at several places (one activation
        # reused), and one without parameters whose results do not depend on the data (a
        # rotary table's cos and sin): each reader computes those itself.
        stateless = {u for u, c in calls.items() if len(c) > 1 and not has_state(self.model.get_submodule(u))}
        constant = {u for u in calls if not any(True for _ in self.model.get_submodule(u).parameters()) and
                    all(self.constant[n] for n, (v, _) in found.items() if v == u)}
        units = {n: (u if len(calls[u]) == 1 else f"{u}@{c}") for n, (u, c) in found.items()
                 if u not in stateless | constant}
        # An item taken from a layer's non-tensor result (a tuple) is the layer's own work.
        for n in self.nodes:
            if (n not in units and n.op == "call_function" and n.target is operator.getitem and
                    n.args[0] in units and not self.is_tensor(n.args[0])):
                units[n] = units[n.args[0]]
        return units

    def assign(self):
        """self.owner (node -> its layer), self.copied (nodes each reader recomputes) and
        self.order (the layers in the order forward() first runs them)."""
        self.constant = self.constants()
        owner = self.module_units()
        self.order = list(dict.fromkeys(owner[n] for n in self.nodes if n in owner))
        if not self.order:
            raise CaptureError("forward() calls no module with parameters, so there is nothing to place on stages")
        index = {u: i for i, u in enumerate(self.order)}
        # The latest layer each node depends on.
        latest: Dict[torch.fx.Node, int] = {}
        for n in self.nodes:
            if n in owner:
                latest[n] = index[owner[n]]
            elif n.op == "call_function":
                latest[n] = max((latest[a] for a in n.all_input_nodes), default=-1)
            else:
                latest[n] = -1
        constant = self.constant
        copied = set()
        readers_memo: Dict[torch.fx.Node, set] = {}

        def readers(n) -> set:
            """The layers that read n: directly, or through values they recompute."""
            if n in readers_memo:
                return readers_memo[n]
            out = set()
            for user in n.users:
                if user.op == "output":
                    out.add(self.order[-1])
                elif self.is_batch_size(user):
                    continue
                elif user in owner:
                    out.add(owner[user])
                elif user in copied:
                    out |= readers(user)
            readers_memo[n] = out
            return out

        for n in reversed(self.nodes):
            if n in owner or n.op != "call_function":
                continue
            if constant[n] or not self.is_tensor(n):
                copied.add(n)
                continue
            layers = readers(n)
            if len(layers) == 1:
                owner[n] = layers.pop()
            elif layers and latest[n] < 0:
                copied.add(n)  # made from the model's input alone: each reader makes it again
            else:  # several readers (a residual add) or none (an effect): beside the latest layer it reads
                owner[n] = self.order[max(latest[n], 0)]
        self.owner, self.copied, self.index = owner, copied, index

    def refine(self) -> bool:
        grown = big_block_holders(self.model, [u.split("@")[0] for u in self.order]) - self.open_modules
        self.open_modules |= grown
        return bool(grown)

    # --- what crosses between layers --------------------------------------------------------

    def inputs_of(self, u: str) -> List[torch.fx.Node]:
        """The tensors layer u reads from the model's input and from other layers, in the
        order it first reads them; constants and recomputed values are made in u."""
        inputs = []

        def visit(n):
            for a in n.all_input_nodes:
                if a.op == "get_attr" or (self.owner.get(a) == u):
                    continue
                if self.is_batch_size(a):
                    continue
                if a in self.copied or not self.is_tensor(a):  # a size computed in another layer too
                    visit(a)
                elif a not in inputs:
                    inputs.append(a)

        for n in self.nodes:
            if self.owner.get(n) == u:
                visit(n)
        return inputs

    def outputs_of(self, u: str, inputs: Dict[str, List[torch.fx.Node]]) -> List[torch.fx.Node]:
        final = self.final()
        sent = {a for v, reads in inputs.items() if v != u for a in reads if self.owner.get(a) == u}
        return [n for n in self.nodes if n in sent or (n is final and self.owner.get(n) == u)]

    def final(self):
        return next(n for n in self.nodes if n.op == "output").args[0][0]

    def separate_junctions(self):
        """A layer hands on what its module returns. Where a layer would hand on more (a
        residual add read by two later layers, beside the layer's own result), the add
        becomes a layer of its own, with the work that only it reads. A module that itself
        returns several tensors later layers read (T5's first block: its hidden states and
        the position bias every later block adds) is a layer with several outputs."""
        for _ in range(len(self.nodes)):
            inputs = {u: self.inputs_of(u) for u in self.order}
            for u in self.order:
                outs = self.outputs_of(u, inputs)
                movable = [n for n in outs if n not in self.module_nodes]  # work between modules
                if len(outs) <= 1 or not movable:
                    continue
                moved = movable[-1]
                new = f"{u}.{moved.name}"
                group = {moved}
                for n in reversed(self.nodes):  # the work in u that only the moved node reads
                    if (self.owner.get(n) == u and n not in self.module_nodes and n.users and
                            all(r in group for r in n.users)):
                        group.add(n)
                for n in group:
                    self.owner[n] = new
                self.glue_kind[new] = getattr(moved.target, "__name__", "glue").split(".")[0]
                self.order.insert(self.order.index(u) + 1, new)
                self.index = {v: i for i, v in enumerate(self.order)}
                break
            else:
                return

    def check_order(self, inputs):
        for u in self.order:
            for a in inputs[u]:
                if a.op != "placeholder" and self.index[self.owner[a]] >= self.index[u]:
                    raise CaptureError(
                        f"layer '{u}' reads {a.name}{_source_line(a)} of '{self.owner[a]}', which forward() first runs "
                        "later; pipetrain runs layers in the order forward() first calls them")

    # --- the layers as TorchScript -------------------------------------------------------

    def attribute_name(self, target: str, u: str) -> str:
        """A weight's name in layer u: of a tied weight's names, the one inside u's module."""
        name = target[len(_ROOT) + 1:] if target.startswith(_ROOT + ".") else target
        names = self.names_of.get(name, [name])
        return next((n for n in names if n.startswith(u.split("@")[0] + ".")), name)

    def child(self, u: str, inputs: List[torch.fx.Node]) -> torch.fx.GraphModule:
        g = torch.fx.Graph()
        root = nn.Module()
        received = {a: g.placeholder(a.name) for a in inputs}  # batch-first, as layers exchange them
        env = {a: (ph if not self.batch_dim(a) else g.call_method("movedim", (ph, 0, self.batch_dim(a))))
               for a, ph in received.items()}
        ref = next(received[a] for a in inputs if self.batch_dim(a) is not None)  # inputs hold one (layer_inputs)
        made = {}

        def once(key, make, before):
            if key not in made:
                with g.inserting_before(before):
                    made[key] = make()
            return made[key]

        def copy_node(n):
            if n in env:
                return env[n]
            if self.is_batch_size(n):
                env[n] = g.call_method("size", (ref, 0))
                return env[n]
            for a in n.all_input_nodes:
                copy_node(a)
            if n.op == "get_attr":
                name = self.attribute_name(n.target, u)
                if not _has(root, name):
                    _set_attribute(root, name, self.attribute(n))
                env[n] = g.get_attr(name)
                return env[n]
            new = g.node_copy(n, lambda a: env[a])
            if str(n.target) == "aten.sym_size.int":
                new.op, new.target = "call_method", "size"
            elif isinstance(n.target, torch._ops.OpOverload):
                if follow_training(n, new, g, lambda: once("training", lambda: g.get_attr("training"), new)):
                    env[n] = new
                    return new
                if isinstance(n.kwargs.get("device"), torch.device):
                    new.kwargs = {**new.kwargs, "device": once("device", lambda: g.call_function(getattr, (ref, "device")), new)}
                new.target = n.target.overloadpacket  # TorchScript calls ops by name, matching the overload itself
            env[n] = new
            return new

        for n in self.nodes:
            if self.owner.get(n) == u:
                copy_node(n)
        results = [self.batch_first(g, copy_node(out), out, ref) for out in self._outputs[u]]
        g.output(results[0] if len(results) == 1 else tuple(results))
        # Named after the module's class, which pipetrain shows as the layer's kind; a
        # layer of work between modules after its operation ("add").
        base = u.split("@")[0]
        kind = self.glue_kind.get(u) or type(self.model.get_submodule(base)).__name__
        child = torch.fx.GraphModule(root, g, class_name=kind)
        child.graph.lint()
        return child

    def batch_first(self, g: torch.fx.Graph, result: torch.fx.Node, out: torch.fx.Node, ref: torch.fx.Node):
        """A layer's result `out` (copied into g as `result`) as layers exchange it: samples
        first, and a value the same for every sample expanded along the batch of `ref`."""
        if self.batch_dim(out):
            return g.call_method("movedim", (result, self.batch_dim(out), 0))
        if self.batch_dim(out) is not None:
            return result
        shape = self.value(out).shape
        batch = g.call_method("size", (ref, 0))
        if len(shape) > 0 and shape[0] == 1:  # a batch dimension of one, broadcast (positions' unsqueeze(0))
            return g.call_method("expand", (result, [batch] + [-1] * (len(shape) - 1)))
        rows = g.call_method("unsqueeze", (result, 0))
        return g.call_method("expand", (rows, [batch] + [-1] * len(shape)))

    def layer_inputs(self, u: str, inputs: List[torch.fx.Node]) -> List[torch.fx.Node]:
        """inputs, with the model's input first where u has no batch-first input to take
        the batch size and the device from."""
        if all(self.batch_dim(a) is None for a in inputs):
            return [self.input] + inputs
        return inputs

    def build(self) -> torch.jit.ScriptModule:
        self.assign()
        while self.refine():
            self.assign()
        self.module_nodes = set(self.module_units())
        self.glue_kind: Dict[str, str] = {}
        self.separate_junctions()
        inputs = {u: self.inputs_of(u) for u in self.order}
        self.check_order(inputs)
        self._outputs = {}
        for u in self.order:
            outs = self.outputs_of(u, inputs)
            if not outs:
                raise CaptureError(f"layer '{u}' hands nothing to the layers after it; forward() must use every "
                                   "module's result")
            self._outputs[u] = outs
        final = self.final()
        if self.owner.get(final) != self.order[-1]:
            raise CaptureError("forward() must return the output of its last layer")
        if self.batch_dim(final):
            raise CaptureError(f"forward() returns its result with the samples in dimension {self.batch_dim(final)}"
                               f"{_source_line(final)}; pipetrain's loss reads them in dimension 0: return "
                               f"it batch-first (.transpose(0, {self.batch_dim(final)}))")
        wrapper = nn.Module()
        wiring: Dict[str, List[str]] = {}
        names = self.names or [None]
        produced = {n: input_key(name) for n, name in zip(self.input_nodes, names)}
        top = torch.fx.Graph()
        top_env = {n: top.placeholder(name or INPUT) for n, name in zip(self.input_nodes, names)}
        for u in self.order:
            reads = self.layer_inputs(u, inputs[u])
            name = layer_name(u)
            if name in wiring:
                raise CaptureError(f"two layers would both be named '{name}' ('{u}' and another); rename one module")
            setattr(wrapper, name, self.script(u, self.child(u, reads)))
            wiring[name] = [produced[a] for a in reads]
            called = top.call_module(name, tuple(top_env[a] for a in reads))
            outs = self._outputs[u]
            for k, out in enumerate(outs):  # the k-th of several outputs is "NAME:k" in the wiring
                produced[out] = name if k == 0 else f"{name}:{k}"
                top_env[out] = called if len(outs) == 1 else top.call_function(operator.getitem, (called, k))
        top.output(top_env[final])
        whole = torch.fx.GraphModule(wrapper, top, class_name=type(self.model).__name__ + "Layers")
        whole.pipetrain_inputs = wiring
        if self.names:
            whole.pipetrain_input_names = self.names  # forward()'s order, in which train packs them
        whole.pipetrain_state_dict = self.user_names(whole)
        untrained = self.untrained(whole.pipetrain_state_dict)
        if untrained:
            whole.pipetrain_untrained = untrained
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*instance-level annotations.*")
                scripted = torch.jit.script(whole)
        except Exception as e:
            raise CaptureError(f"TorchScript cannot compile the captured layers: {e}") from e
        check_loadable(scripted)
        return scripted

    @staticmethod
    def script(u: str, child: torch.fx.GraphModule) -> torch.jit.ScriptModule:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*instance-level annotations.*")
                return torch.jit.script(child)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CaptureError(f"TorchScript cannot compile layer '{u}' ({first}); its code:\n{child.code}") from e

    def user_names(self, whole: nn.Module) -> Dict[str, str]:
        """The file's state_dict keys -> the user's names, comma-separated where a weight is
        tied: every name the user's state_dict has for it."""
        user = set(self.model.state_dict().keys())
        out = {}
        for key in whole.state_dict().keys():
            inner = key.split(".", 1)[1]
            if inner in user:
                out[key] = inner
        held = set(out.values())
        for key, inner in list(out.items()):
            others = [n for n in self.names_of.get(inner, []) if n not in held and n in user]
            if others:
                out[key] = ",".join([inner] + others)
                held.update(others)
        left_out = [k for k in self.untrained(out) if not any(k.startswith(p + ".") for p in self.left_out)]
        if left_out:
            print(f"note: forward() never reads {', '.join(left_out)}; pipetrain trains without them, and they keep "
                  "their values", file=sys.stderr)
        return out

    def untrained(self, names: Dict[str, str]) -> Dict[str, torch.Tensor]:
        """The user's state_dict entries no layer holds (`names`: user_names'), as they are:
        the file keeps them (`pipetrain_untrained`), so that the trained weights load back
        into the user's class with load_state_dict(strict=True)."""
        held = {n for v in names.values() for n in v.split(",")}
        return {k: v.detach().clone() for k, v in self.model.state_dict().items() if k not in held}


def _get(module: nn.Module, dotted: str):
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def _has(module: nn.Module, dotted: str) -> bool:
    try:
        _get(module, dotted)
        return True
    except AttributeError:
        return False
