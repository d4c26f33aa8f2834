"""Schedules, simulations and plans as Python objects, over `pipetrain schedule`,
`simulate` and `plan` (the same planner and simulator the CLI and `train` use). A
Program and a Simulation render as their Gantt chart in Jupyter (`_repr_svg_`)."""
import csv
import io
import dataclasses
import json
import os
import tempfile
from typing import List, Optional

from torch import nn

from . import _binary, _data
from ._binary import PipetrainError
from ._summary import Plan


@dataclasses.dataclass
class Simulation:
    """The simulator's prediction: throughput (samples per second), the bubble, each
    rank's figures, and the Gantt chart."""
    throughput: float
    bubble_fraction: float
    iteration_seconds: float
    ranks: List[dict]
    json: dict = dataclasses.field(repr=False)
    svg: str = dataclasses.field(repr=False)

    def _repr_svg_(self):
        return self.svg


# Each request runs in this process where pipetrain_native loads (_binary.native()),
# else as the executable's command: the same C++ request and option table either way.

def _simulated(options: dict) -> Simulation:
    module = _binary.native()
    if module:
        text, svg = module.simulate(_binary.native_values(options))
    else:
        with tempfile.TemporaryDirectory() as folder:
            svg_path = os.path.join(folder, "gantt.svg")
            text = _binary.run(["simulate", *_binary.flags(options), "--json", "--svg", svg_path])
            with open(svg_path) as f:
                svg = f.read()
    j = json.loads(text)
    return Simulation(j["throughput"], j["bubble_fraction"], j["iteration_time"], j["ranks"], j, svg)


def _schedule_csv(options: dict) -> str:
    module = _binary.native()
    if module:
        return module.schedule_csv(_binary.native_values(options))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "program.csv")
        _binary.run(["schedule", *_binary.flags(options), "--write-csv", path])
        with open(path) as f:
            return f.read()


def _planned(options: dict) -> tuple:
    """The planner's choice and ranked table (`plan --json`), and the chosen plan's JSON."""
    module = _binary.native()
    if module:
        text, plan_text = module.plan(_binary.native_values(options))
        return json.loads(text), json.loads(plan_text)
    with tempfile.TemporaryDirectory() as folder:
        plan_path = os.path.join(folder, "plan.json")
        j = json.loads(_binary.run(["plan", *_binary.flags(options), "--json", "--out", plan_path]))
        with open(plan_path) as f:
            return j, json.load(f)


@dataclasses.dataclass
class Program:
    """A schedule's compute actions per rank, as `pipetrain schedule` generates them:
    "0F1" is stage 0's forward pass of micro-batch 1, B a backward pass (I and W where a
    schedule splits it into input and weight gradients)."""
    schedule: str
    stages: int
    microbatches: int
    options: dict
    actions: List[List[str]]

    def simulate(self, forward: float = 1.0, backward: float = 2.0, weight: Optional[float] = None) -> Simulation:
        """Every stage at these costs (seconds; `weight`: the weight-gradient part of
        `backward`), messages free."""
        costs = [forward, backward] + ([weight] if weight is not None else [])
        return _simulated({"schedule": self.schedule, "stages": self.stages, "microbatches": self.microbatches,
                           **self.options, "uniform": costs})

    def _repr_svg_(self):
        return self.simulate()._repr_svg_()


def schedule(name: str, stages: int, microbatches: int, **options) -> Program:
    """The Program of schedule `name` (gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v,
    dualpipev, pipedream, 2bw, pipemare) on `stages` ranks; options as `pipetrain
    schedule`'s (chunks=2 for interleaved)."""
    text = _schedule_csv({"schedule": name, "stages": stages, "microbatches": microbatches, **options})
    actions = [row for row in csv.reader(io.StringIO(text, newline=""))]
    return Program(name, stages, microbatches, options, actions)


def _json_file(value, folder: str, name: str) -> str:
    """A path as given, or a dict written as JSON into `folder`."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    if isinstance(value, dict):
        path = os.path.join(folder, name)
        with open(path, "w") as f:
            json.dump(value, f)
        return path
    raise PipetrainError(f"{name.split('.')[0]} is a {type(value).__name__}: give a path or a dict")


def simulate(graph, cluster, plan, **options) -> Simulation:
    """A plan's predicted timeline on a cluster: a layer graph (`pipetrain profile`'s),
    a cluster spec and a plan, each a path or a dict (docs/formats.md)."""
    with tempfile.TemporaryDirectory() as folder:
        return _simulated({"graph": _json_file(graph, folder, "graph.json"),
                           "cluster": _json_file(cluster, folder, "cluster.json"),
                           "plan": _json_file(plan, folder, "plan.json"), **options})


@dataclasses.dataclass(frozen=True)
class Candidate:
    plan: Plan
    throughput: float       # predicted samples per second
    bubble_fraction: float
    asynchronous: bool


@dataclasses.dataclass
class PlanChoice:
    """The planner's answer: the chosen plan first among the ranked candidates."""
    chosen: Candidate
    candidates: List[Candidate]
    plan_json: dict = dataclasses.field(repr=False)  # the chosen plan as `train --plan` reads it
    json: dict = dataclasses.field(repr=False)

    def save(self, path: str) -> str:
        """Writes the chosen plan for `pipetrain train --plan` or pipetrain.train(plan=...)."""
        with open(path, "w") as f:
            json.dump(self.plan_json, f, indent=1)
        return path


def _candidate(j: dict) -> Candidate:
    return Candidate(Plan.from_json(j, j["name"]), j["predicted_throughput"], j["bubble_fraction"], j.get("asynchronous", False))


def plan(model_or_graph, data=None, *, cluster, batch: int, output: str = None, **options) -> PlanChoice:
    """Chooses schedule, stages, replicas and micro-batches for a model on a cluster.

    model_or_graph: a layer graph (path or dict, from `pipetrain profile`), or an
        nn.Module, which is captured on `data` (with `output`, as pipetrain.train takes
        it) and profiled here first, on this machine's CPU at micro-batches of
        min(batch, 8) and batch.
    cluster: a cluster spec (path or dict); options as `pipetrain plan`'s
        (schedule="1f1b", allow_async=True, recompute="auto", ...)."""
    with tempfile.TemporaryDirectory() as folder:
        if isinstance(model_or_graph, nn.Module):
            if data is None:
                raise PipetrainError("planning an nn.Module needs data= to capture and profile it on")
            from ._train import captured
            data_path = _data.data_file(data)
            graph = os.path.join(folder, "graph.json")
            _binary.run(["profile", "--model-file", captured(model_or_graph, data_path, output), "--data-file", data_path,
                         "--batch", min(batch, 8), batch, "--out", graph])
        else:
            graph = _json_file(model_or_graph, folder, "graph.json")
        j, plan_json = _planned({"graph": graph, "cluster": _json_file(cluster, folder, "cluster.json"),
                                 "batch": batch, **options})
    candidates = [_candidate(c) for c in j["candidates"]]
    return PlanChoice(_candidate(j), candidates, plan_json, j)
