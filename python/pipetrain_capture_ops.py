"""What the operations of torch.export's graph become in pipetrain's layers.

- Training mode: torch.export traces forward() in training mode, which fixes the
  training flag of dropout, batch norm and recurrent layers, the probability of
  attention's dropout and of Bernoulli draws (stochastic depth) in the graph. In a layer
  they follow the layer's `training` again (follow_training).
- Operators registered in Python (torch.library: `torch.library.custom_op`, a
  `Library.define`) exist only in the process that registered them; LibTorch cannot load
  a file that calls one. They are decomposed into ATen's operations where they can be
  (decompose_custom_ops), refused where they cannot, and no file calling one is written
  (check_loadable)."""
from typing import Callable, Dict, Optional

import torch
import torch.fx
import torch.library
from torch._library import custom_ops

from pipetrain_capture_common import CaptureError, quiet_torch_logs

# Operations whose training flag was fixed when the model was traced in training mode.
# Recurrent layers take it for the dropout between their layers.
_TRAINING_ARGUMENT = {"aten.dropout.default": 2, "aten.feature_dropout.default": 2, "aten.alpha_dropout.default": 2,
                      "aten.feature_alpha_dropout.default": 2, "aten.batch_norm.default": 5,
                      "aten.lstm.input": 6, "aten.gru.input": 6, "aten.rnn_tanh.input": 6, "aten.rnn_relu.input": 6,
                      "aten.lstm.data": 7, "aten.gru.data": 7, "aten.rnn_tanh.data": 7, "aten.rnn_relu.data": 7}
# A Bernoulli draw in training mode: a mask over samples (stochastic depth: timm's
# DropPath, torchvision's StochasticDepth) or elements. Its probability and the division
# by it that scales the kept samples follow the training flag, so that evaluation keeps
# every sample as forward() does there, and draws nothing.
_BERNOULLI = ("aten.bernoulli_.float", "aten.bernoulli.p")
_DIVISIONS = ("aten.div_.Tensor", "aten.div.Tensor", "aten.div_.Scalar", "aten.div.Scalar")
# Attention's dropout probability, which models pass as `p if self.training else 0.0`.
_DROPOUT_PROBABILITY = {"aten.scaled_dot_product_attention.default": (4, "dropout_p")}


def when_training(p: float, training: bool) -> float:
    """The dropout probability in training mode, none in evaluation mode."""
    return p if training else 0.0


def bernoulli_when_training(mask: torch.Tensor, p: float, training: bool, in_place: bool) -> torch.Tensor:
    """A Bernoulli draw of ones with probability p in training mode; ones, drawing nothing,
    in evaluation mode (see _BERNOULLI)."""
    if training:
        return mask.bernoulli_(p) if in_place else torch.bernoulli(mask, p)
    return mask.fill_(1.0) if in_place else torch.ones_like(mask)


def scale_when_training(mask: torch.Tensor, divisor: float, training: bool, in_place: bool) -> torch.Tensor:
    """A drawn mask divided by the probability of keeping, in training mode only."""
    if not training:
        return mask
    return mask.div_(divisor) if in_place else mask.div(divisor)


def batch_norm_input(x: torch.Tensor, training: bool) -> torch.Tensor:
    """x, refused as nn.BatchNorm refuses it in training mode: one value per channel has
    no variance (the check is in Python, so torch.export leaves it out)."""
    if training:
        size = x.size()
        values = size[0]
        for d in range(2, len(size)):
            values *= size[d]
        if values == 1:
            raise ValueError("Expected more than 1 value per channel when training, got input size " + str(size))
    return x


def follow_training(n: torch.fx.Node, new: torch.fx.Node, g: torch.fx.Graph, training: Callable) -> bool:
    """Makes `new`, the layer's copy of the exported node n, follow the layer's training
    flag (`training()` makes the node that reads it). Whether `new` became a call of one
    of the functions above, which keeps its target."""
    target = str(n.target)
    position = _TRAINING_ARGUMENT.get(target)
    if position is not None and len(n.args) > position and isinstance(n.args[position], bool):
        args = list(new.args)
        args[position] = training()
        if target == "aten.batch_norm.default":
            with g.inserting_before(new):
                args[0] = g.call_function(batch_norm_input, (args[0], args[position]))
        new.args = tuple(args)
    if _follow_bernoulli(n, new, training):
        return True
    attention = _DROPOUT_PROBABILITY.get(target)
    if attention is not None:
        _follow_dropout_probability(new, *attention, training, g)
    return False


def _follow_bernoulli(n, new, training) -> bool:
    """A Bernoulli draw with a constant probability, and its mask's division by a constant,
    as calls that follow the training flag (_BERNOULLI). Whether n was one."""
    def draw(node) -> bool:
        return str(node.target) in _BERNOULLI and len(node.args) > 1 and isinstance(node.args[1], float)

    if draw(n):
        new.args = (new.args[0], n.args[1], training(), str(n.target).startswith("aten.bernoulli_"))
        new.target = bernoulli_when_training
    elif (str(n.target) in _DIVISIONS and isinstance(n.args[0], torch.fx.Node) and draw(n.args[0]) and
          isinstance(n.args[1], float)):
        new.args = (new.args[0], n.args[1], training(), str(n.target).startswith("aten.div_"))
        new.target = scale_when_training
    else:
        return False
    new.kwargs = {}
    return True


def _follow_dropout_probability(node, position: int, keyword: str, training, g: torch.fx.Graph):
    """Makes node's dropout probability (argument `position` or `keyword`) none in evaluation mode."""
    p = node.args[position] if len(node.args) > position else node.kwargs.get(keyword, 0.0)
    if not isinstance(p, float) or p == 0.0:
        return
    with g.inserting_before(node):
        follows = g.call_function(when_training, (p, training()))
    if len(node.args) > position:
        node.args = node.args[:position] + (follows,) + node.args[position + 1:]
    else:
        node.kwargs = {**node.kwargs, keyword: follows}


# --- operators registered in Python ---------------------------------------------------------

def registered_in_python(qualified_name: str) -> bool:
    """Whether the operator "namespace::name" was defined from Python (torch.library), so
    that LibTorch, which runs no Python, lacks it (torch's own prims:: among them)."""
    return qualified_name in torch.library._defs or qualified_name in custom_ops.OPDEFS


def _decomposition(op) -> Optional[Callable]:
    """ATen operations for op: its registered decomposition or CompositeImplicitAutograd
    kernel (as torch.export's default decompositions hold them), or the Python function
    torch.library.custom_op made it from, traced through."""
    defaults = torch.export.default_decompositions()
    if op in defaults:
        return defaults[op]
    definition = custom_ops.OPDEFS.get(op._schema.name)
    return getattr(definition, "_init_fn", None)


def _python_ops(program) -> Dict[object, torch.fx.Node]:
    """The operators registered in Python that the program calls, each with a node calling it."""
    return {n.target: n for n in program.graph.nodes
            if isinstance(n.target, torch._ops.OpOverload) and registered_in_python(n.target._schema.name)}


def decompose_custom_ops(program, explain_node: Callable[[torch.fx.Node], str]):
    """The exported program with every operator registered in Python decomposed into ATen's
    operations (_decomposition); a CaptureError naming the operator and where forward()
    calls it (`explain_node(n)`: the module and the line) for one that cannot be."""
    found = _python_ops(program)
    if not found:
        return program
    why = ""
    table = {op: fn for op in found if (fn := _decomposition(op)) is not None}
    if table:
        try:
            with quiet_torch_logs():
                program = program.run_decompositions(table)
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            why = f" (its Python implementation cannot be traced as one graph: {first})"
    left = _python_ops(program)
    if left:
        op, n = next(iter(left.items()))
        raise CaptureError(f"forward() calls {op._schema.name}{explain_node(n)}, an operator registered in Python "
                           f"(torch.library), which LibTorch cannot load and which has no decomposition into ATen's "
                           f"operations{why}: write that module with torch's own operations, or register a "
                           f"decomposition for the operator")
    return program


def check_loadable(scripted: torch.jit.ScriptModule):
    """Refuses a file LibTorch could not load: one whose code calls an operator registered
    in Python."""
    called = set()

    def visit(block):
        for node in block.nodes():
            called.add(node.kind())
            for inner in node.blocks():
                visit(inner)

    visit(scripted.inlined_graph)
    missing = sorted(k for k in called if registered_in_python(k))
    if missing:
        raise CaptureError(f"the captured layers call {', '.join(missing)}, registered in Python (torch.library), "
                           "which LibTorch cannot load; no file was written")

