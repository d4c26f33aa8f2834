"""Regions of an exported graph that torch.export keeps as higher-order operators, made
plain operators again, so that the graph cuts into layers and each layer scripts.

`with torch.no_grad():` (or `torch.set_grad_enabled(False)`) inside forward() exports as
`wrap_with_set_grad_enabled(False, submodule, *inputs)`. TorchScript cannot call it. Its
body is inlined in its place, and each of its results detached where gradients were off:
the same values, and no gradient through them, as in the eager model."""
import operator

import torch
import torch.fx

from pipetrain_capture_common import CaptureError

_GRAD_REGION = "wrap_with_set_grad_enabled"


def inline_grad_regions(gm: torch.fx.GraphModule) -> None:
    """Inlines every grad-mode region of `gm`, in place; refuses another higher-order
    operator (autocast regions, control flow) with what to change."""
    g = gm.graph
    for n in list(g.nodes):
        if n.op != "call_function" or not isinstance(n.target, torch._ops.HigherOrderOperator):
            continue
        if n.target.name() != _GRAD_REGION:
            raise CaptureError(f"forward() runs {n.target.name()} (an autocast region or traced control flow), which "
                               "pipetrain cannot cut into layers: take it out of forward() (for mixed precision, "
                               "train --precision bf16)")
        enabled, body_node, *inputs = n.args
        body = getattr(gm, body_node.target)
        env = {}
        results = []
        with g.inserting_before(n):
            placeholders = iter(inputs)
            for inner in body.graph.nodes:
                if inner.op == "placeholder":
                    env[inner] = next(placeholders)
                elif inner.op == "get_attr":
                    raise CaptureError("a torch.no_grad() block of forward() reads a module's tensor directly; "
                                       "compute it outside the block")
                elif inner.op == "output":
                    results = [env[a] if isinstance(a, torch.fx.Node) else a for a in inner.args[0]]
                else:
                    env[inner] = g.node_copy(inner, lambda a: env[a])
                    if "nn_module_stack" not in env[inner].meta and "nn_module_stack" in n.meta:
                        env[inner].meta["nn_module_stack"] = n.meta["nn_module_stack"]
            if not enabled:
                detached = []
                for r in results:
                    d = g.call_function(torch.ops.aten.detach.default, (r,))
                    d.meta = {**r.meta, "val": r.meta["val"].detach()} if "val" in r.meta else dict(r.meta)
                    detached.append(d)
                results = detached
        for user in list(n.users):
            if user.op != "call_function" or user.target is not operator.getitem:
                raise CaptureError(f"forward()'s torch.no_grad() block is used as a whole ({user.format_node()})")
            user.replace_all_uses_with(results[user.args[1]])
            g.erase_node(user)
        g.erase_node(n)
        if not body_node.users:
            g.erase_node(body_node)
            delattr(gm, body_node.target)
    g.lint()
    gm.recompile()
