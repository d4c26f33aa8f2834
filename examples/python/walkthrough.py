# %% [markdown]
# # pipetrain from Python, a walk-through
# Cells for Jupyter or VS Code (`# %%`); as a script it runs top to bottom:
# `.venv/bin/python examples/python/walkthrough.py`. Schedules and simulations render as
# Gantt charts in a notebook.

# %%
import os
import sys

import torch
from torch import nn

here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.getcwd()
root = os.path.abspath(os.path.join(here, "..", ".."))
sys.path.insert(0, os.path.join(root, "python"))
import pipetrain  # noqa: E402

# %% [markdown]
# ## Schedules side by side
# The same 4 stages and 8 micro-batches, backward twice a forward, messages free.

# %%
for name in ["gpipe", "1f1b", "zb-h1", "zb-h2"]:
    program = pipetrain.schedule(name, stages=4, microbatches=8)
    weight = 1.0 if name.startswith("zb") else None  # zero-bubble schedules split B into I and W
    print(f"{name:6s} bubble {program.simulate(1.0, 2.0, weight).bubble_fraction:.3f}  rank 0: {' '.join(program.actions[0][:8])} ...")
program = pipetrain.schedule("zb-h1", stages=4, microbatches=8)
program  # in a notebook: its Gantt chart

# %% [markdown]
# ## A plan for a profiled transformer on an 8-GPU server

# %%
graph = os.path.join(root, "examples/transformer/graph.json")
cluster = os.path.join(root, "examples/clusters/gpu-server.json")
choice = pipetrain.plan(graph, cluster=cluster, batch=64)
print("chosen:", choice.chosen.plan.describe(), f"{choice.chosen.throughput:.0f} samples/s")
for c in choice.candidates[:5]:
    print(f"  {c.plan.describe():55s} {c.throughput:10.0f} samples/s, bubble {c.bubble_fraction:.2f}")
pipetrain.simulate(graph, cluster, choice.plan_json)  # its predicted timeline

# %% [markdown]
# ## Training your own module on 2 ranks
# A small MLP on a learnable rule; the module comes back trained.

# %%
torch.manual_seed(0)
x = torch.randn(1024, 16)
y = (x[:, :8].sum(1) > x[:, 8:].sum(1)).long()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
run = pipetrain.train(model, (x, y), nproc=2, batch=64, epochs=3, lr=3e-3)
print(run)
print("accuracy on the training data, in the module itself:", (model(x).argmax(1) == y).float().mean().item())
