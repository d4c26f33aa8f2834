"""Cutting a model into pipetrain's layers with torch.fx (`--tracer fx`), the tracer
before torch.export: it keeps each module call as one call, but refuses what fx cannot
trace (iterating a traced shape, a module called at two places, a residual add written in
forward()). Kept for comparison with the default tracer (bench/capture_bench.py)."""
import dis
import inspect
import operator
import re
import sys
import warnings
from typing import Dict, List

import torch
import torch.fx
from torch import nn

from pipetrain_capture_common import CONTAINERS, INPUT, CaptureError, big_block_holders, layer_name, where


class _Tracer(torch.fx.Tracer):
    # Buffers read in forward() (a causal mask sliced to the input's length) must be
    # graph values, and `assert` on a traced size is recorded rather than refused.
    proxy_buffer_attributes = True

    def to_bool(self, obj):
        # fx's own trace_asserts misses Python 3.11's POP_JUMP_FORWARD_IF_TRUE.
        if _in_assert(inspect.currentframe().f_back.f_back):
            self.create_proxy("call_function", torch._assert, (obj, "assertion in forward()"), {})
            return True
        raise CaptureError(
            f"forward() branches on a traced value ({obj.node.format_node()}); pipetrain needs one graph for every "
            "batch: compute the condition from the module's configuration instead, or move the branch into a module "
            "of its own")


def _in_assert(frame) -> bool:
    """Whether `frame` is testing the condition of an `assert` statement."""
    insts = list(dis.get_instructions(frame.f_code))
    at = next((i for i, inst in enumerate(insts) if inst.offset >= frame.f_lasti), None)
    if at is None or at + 1 >= len(insts):
        return False
    jump, then = insts[at], insts[at + 1]
    return ("POP_JUMP" in jump.opname and "IF_TRUE" in jump.opname and
            (then.opname == "LOAD_ASSERTION_ERROR" or (then.opname == "LOAD_GLOBAL" and then.argval == "AssertionError")))


def _values(gm: torch.fx.GraphModule, example: torch.Tensor) -> Dict[torch.fx.Node, object]:
    """Every node's value on the example input."""
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            seen[n] = super().run_node(n)
            return seen[n]

    with torch.no_grad():
        Recorder(gm).run(example)
    return seen


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    # fx marks a module's second call "relu@1"; the module is the same.
    return re.sub(r"@\d+$", "", list(stack.keys())[-1]) if stack else ""


class FxCapture:
    def __init__(self, model: nn.Module, example: torch.Tensor):
        self.model = model
        self.example = example
        try:
            graph = _Tracer().trace(model)
        except CaptureError:
            raise
        except Exception as e:  # fx's own refusals: say what it met, and where in the user's code
            raise CaptureError(f"torch.fx cannot trace forward(){where(e)}: {type(e).__name__}: {e}") from e
        self.gm = torch.fx.GraphModule(model, graph)
        self.nodes = list(graph.nodes)
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        if len(placeholders) != 1:
            raise CaptureError(
                f"forward() takes {len(placeholders)} inputs ({', '.join(n.name for n in placeholders)}); pipetrain "
                "feeds one tensor per sample: give the other arguments defaults, or take them from the first")
        self.input = placeholders[0]
        self.value = _values(self.gm, example)
        self.open_modules = set()

    def is_tensor(self, n) -> bool:
        return isinstance(self.value.get(n), torch.Tensor)

    def opened(self, module: nn.Module, path: str) -> bool:
        """Whether a module's parts are layers rather than the module: the model itself,
        containers, and modules opened for holding too much (refine)."""
        return not path or isinstance(module, CONTAINERS) or path in self.open_modules

    def unit_of_path(self, path: str):
        """The layer that a module at `path` belongs to: the shortest prefix of the path
        that is not opened. None for work an opened module does itself: glue."""
        prefix = []
        module = self.model
        for part in path.split(".") if path else []:
            if not self.opened(module, ".".join(prefix)):
                return ".".join(prefix)
            module = getattr(module, part)  # containers' items too: Sequential's may have names
            prefix.append(part)
        return None if self.opened(module, ".".join(prefix)) else ".".join(prefix)

    def refine(self) -> bool:
        """Opens the layers that hold a large list of blocks (big_block_holders). Whether any was opened."""
        grown = big_block_holders(self.model, self.order) - self.open_modules
        self.open_modules |= grown
        return bool(grown)

    def assign_units(self):
        """Each node's layer: its module's, or for glue the first layer reading it."""
        unit = {}
        for n in self.nodes:
            path = _module_path(n)
            if n.op in ("call_module", "call_function", "call_method") and self.unit_of_path(path):
                unit[n] = self.unit_of_path(path)
        self.order = []
        for n in self.nodes:
            if n in unit and unit[n] not in self.order:
                self.order.append(unit[n])
        if not self.order:
            raise CaptureError("forward() calls no module, so there is nothing to place on stages")
        index = {u: i for i, u in enumerate(self.order)}
        last = self.order[-1]
        # Taking an item of a layer's non-tensor output (a module returning a tuple, as
        # nn.MultiheadAttention does) is the layer's own work: it hands on the item.
        for n in self.nodes:
            if (n.op == "call_function" and n.target is operator.getitem and n not in unit and
                    n.args[0] in unit and not self.is_tensor(n.args[0])):
                unit[n] = unit[n.args[0]]
        next_unit = last
        for n in reversed(self.nodes):  # glue joins its first reader
            if n in unit:
                next_unit = unit[n]
                continue
            if n.op in ("placeholder", "output"):
                continue
            readers = [unit[u] if u.op != "output" else last for u in n.users]
            if readers:
                unit[n] = min(readers, key=index.__getitem__)
            else:  # read by nothing (an assert): beside the latest layer it reads, or the next
                sources = [unit[a] for a in n.all_input_nodes if a in unit]
                unit[n] = max(sources, key=index.__getitem__) if sources else next_unit
        self.unit = unit
        self.index = index

    def check_order(self):
        for n in self.nodes:
            if n not in self.unit:
                continue
            for a in n.all_input_nodes:
                if a in self.unit and self.index[self.unit[a]] > self.index[self.unit[n]] and self.is_tensor(a):
                    raise CaptureError(
                        f"'{self.unit[n]}' reads the output of '{self.unit[a]}', which forward() first calls later: "
                        "a module called at two places cannot be one layer; give each call its own module")

    def crossing_inputs(self, u: str) -> List[torch.fx.Node]:
        """The tensors layer u reads from the model's input and from earlier layers, in
        the order they are first read; non-tensor values are recomputed, not carried."""
        inputs = []

        def visit(n):
            for a in n.all_input_nodes:
                if a.op == "placeholder":
                    if a not in inputs:
                        inputs.append(a)
                elif self.unit[a] != u:
                    if a.op == "get_attr" or (not self.is_tensor(a) and a.op != "call_module"):
                        visit(a)  # a weight or a size: taken or recomputed here
                    elif a not in inputs:
                        inputs.append(a)

        for n in self.nodes:
            if self.unit.get(n) == u:
                visit(n)
        return inputs

    def output_of(self, u: str) -> torch.fx.Node:
        outs = []
        for n in self.nodes:
            if self.unit.get(n) != u:
                continue
            carried = n.op == "call_module" or (self.is_tensor(n) and n.op != "get_attr")
            if any(r.op == "output" or (self.unit[r] != u and carried) for r in n.users):
                outs.append(n)
        if len(outs) != 1 or not self.is_tensor(outs[0]):
            what = ", ".join(o.format_node() for o in outs) or "nothing"
            raise CaptureError(
                f"layer '{u}' must hand one tensor to the layers after it, and hands on {what}; return one tensor from "
                "the module, or wrap the modules that exchange several values in one module")
        return outs[0]

    def batch_first(self, n: torch.fx.Node) -> bool:
        v = self.value[n]
        return v.dim() > 0 and v.size(0) == self.example.size(0)

    def crossing(self, u: str) -> List[torch.fx.Node]:
        """crossing_inputs, plus the model's input where u must expand its output along the batch."""
        inputs = self.crossing_inputs(u)
        if not self.batch_first(self.output_of(u)) and self.input not in inputs:
            inputs.insert(0, self.input)
        return inputs

    def child(self, u: str, inputs: List[torch.fx.Node]) -> torch.fx.GraphModule:
        g = torch.fx.Graph()
        env = {}
        for a in inputs:
            env[a] = g.placeholder(a.name)

        def copy_node(n):
            if n in env:
                return env[n]
            for a in n.all_input_nodes:
                copy_node(a)
            env[n] = g.node_copy(n, lambda a: env[a])
            return env[n]

        for n in self.nodes:
            if self.unit.get(n) == u:
                copy_node(n)
        out = self.output_of(u)
        result = env[out]
        if not self.batch_first(out):  # the same rows for every sample
            batch = g.call_method("size", (env[self.input], 0))
            rows = g.call_method("unsqueeze", (result, 0))
            result = g.call_method("expand", (rows, [batch] + [-1] * self.value[out].dim()))
        g.output(result)
        # Named after the module's class, which pipetrain shows as the layer's kind.
        child = torch.fx.GraphModule(self.model, g, class_name=type(self.model.get_submodule(u)).__name__)
        child.graph.lint()
        return child

    def build(self) -> torch.jit.ScriptModule:
        self.assign_units()
        while self.refine():
            self.assign_units()
        self.check_order()
        wrapper = nn.Module()
        wiring: Dict[str, List[str]] = {}
        produced = {self.input: INPUT}
        top = torch.fx.Graph()
        top_env = {self.input: top.placeholder(INPUT)}
        for u in self.order:
            inputs = self.crossing(u)
            name = layer_name(u)
            if name in wiring:
                raise CaptureError(f"two layers would both be named '{name}' ('{u}' and another); rename one module")
            setattr(wrapper, name, self.child(u, inputs))
            wiring[name] = [produced[a] for a in inputs]
            out = self.output_of(u)
            produced[out] = name
            top_env[out] = top.call_module(name, tuple(top_env[a] for a in inputs))
        final = next(n for n in self.nodes if n.op == "output").args[0]
        if produced.get(final) != layer_name(self.order[-1]):
            raise CaptureError("forward() must return one tensor, the last layer's output")
        top.output(top_env[final])
        whole = torch.fx.GraphModule(wrapper, top, class_name=type(self.model).__name__ + "Layers")
        whole.pipetrain_inputs = wiring
        whole.pipetrain_state_dict = self.names(whole)
        try:
            with warnings.catch_warnings():  # about fx's generated __init__, which TorchScript does not compile
                warnings.filterwarnings("ignore", message=".*instance-level annotations.*")
                scripted = torch.jit.script(whole)
        except Exception as e:
            raise CaptureError(f"TorchScript cannot compile the captured layers: {e}") from e
        self.verify(scripted)
        return scripted

    def names(self, whole: nn.Module) -> Dict[str, str]:
        """The file's state_dict keys -> the user's: a layer's tensors keep their paths."""
        user = set(self.model.state_dict().keys())
        out = {}
        for key in whole.state_dict().keys():
            inner = key.split(".", 1)[1]
            if inner in user:
                out[key] = inner
        # Tied weights appear in the user's state_dict under every name; one holder is enough.
        held = {id(t) for k, t in self.model.state_dict(keep_vars=True).items() if k in set(out.values())}
        missing = [k for k, t in self.model.state_dict(keep_vars=True).items()
                   if k not in set(out.values()) and id(t) not in held]
        if missing:
            print(f"note: forward() never reads {', '.join(missing)}; pipetrain trains without them, and they keep "
                  "their values", file=sys.stderr)
        return out

    def verify(self, scripted):
        with torch.no_grad():
            want = self.model(self.example)
            got = scripted(self.example)
        if not isinstance(want, torch.Tensor) or want.shape != got.shape or not torch.allclose(want, got, 1e-4, 1e-5):
            raise CaptureError("the captured layers do not reproduce forward() on the example input")
