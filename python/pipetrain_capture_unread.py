"""Work the trained output never reads, left out of the layers: an auxiliary head
(torchvision's GoogLeNet's, Inception's), the other outputs of a multi-task model or of a
ModelOutput (`--output` picks one), a module called for nothing."""
import sys
from typing import Callable, Dict, List, Optional, Tuple

import torch.fx
from torch import nn


def leave_out_unread(gm: torch.fx.GraphModule, nodes: List[torch.fx.Node],
                     module_of: Callable[[torch.fx.Node], Optional[str]], names_of: Dict[str, List[str]],
                     model: nn.Module, key: Optional[str], root: str) -> Tuple[List[torch.fx.Node], List[str]]:
    """Erases from `gm` the nodes whose results never reach its output, and returns the
    nodes left and the left-out modules' paths, outermost first. The left-out modules'
    effects go with them (their batch norm's statistics); the kept modules' effects, and
    work between modules that only updates state, stay. `module_of(n)`: the path of the
    innermost module of `model` that made node n (None outside every module);
    `names_of`: every name of each parameter (tied weights have several); `key`: the
    output trained on; `root`: the model's name in gm's attribute names. Says on stderr
    which modules are left out and how many parameters go untrained."""
    reaches = set()

    def reach(stack):  # what the nodes in `stack` read, at any remove
        while stack:
            n = stack.pop()
            if n not in reaches:
                reaches.add(n)
                stack.extend(n.all_input_nodes)

    def effect(n) -> bool:  # an in-place update whose result nothing reads
        schema = getattr(n.target, "_schema", None)
        return schema is not None and schema.is_mutable

    reach([n for n in nodes if n.op == "output"])
    inner = {n: module_of(n) for n in nodes if n.op == "call_function" and module_of(n) is not None}
    kept_modules = {inner[n] for n in reaches if n in inner}
    reach([n for n in nodes if n not in reaches and effect(n) and (inner.get(n) in kept_modules or n not in inner)])
    unread = [n for n in nodes if n.op == "call_function" and n not in reaches]
    if not unread:
        return nodes, []
    # The outermost modules nothing of which is kept: "aux_head", not its three parts.
    # (Unread work inside a kept module, such as an LSTM's final states, goes silently.)
    modules, outermost = set(), set()
    for path in {inner[n] for n in unread if n in inner}:
        parts = path.split(".")
        unkept = [p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1))
                  if not any(k == p or k.startswith(p + ".") for k in kept_modules)]
        if unkept:
            modules.add(path)
            outermost.add(unkept[0])
    outermost = sorted(outermost)
    for n in reversed(unread):
        gm.graph.erase_node(n)
    unread = set(unread)
    nodes = [n for n in nodes if n not in unread]
    read = [n.target[len(root) + 1:] for n in nodes if n.op == "get_attr" and n.users]
    trained = {name for r in read for name in names_of.get(r, [r])}  # a tied weight under each name
    untrained = {id(p): p.numel() for path in outermost
                 for name, p in model.get_submodule(path).named_parameters(prefix=path) if name not in trained}
    if outermost:
        output = f"the output '{key}'" if key is not None else "forward()'s result"
        print(f"note: left out of training: {', '.join(outermost)} ({len(modules)} module"
              f"{'s' if len(modules) != 1 else ''}, {sum(untrained.values())} parameters untrained): their results "
              f"never reach {output}; the exported state_dict keeps their values as they were", file=sys.stderr)
    return nodes, outermost
