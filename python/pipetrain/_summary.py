"""A training run's summary (`train --summary-json`, format pipetrain.train-summary) as
Python objects: the fields a user reads, typed, and the whole JSON kept in `json`."""
import dataclasses
import json
from typing import List, Optional

from ._binary import PipetrainError


@dataclasses.dataclass(frozen=True)
class Stage:
    layers: List[str]   # the model's layers this stage runs, in order
    devices: List[str]  # one per replica


@dataclasses.dataclass(frozen=True)
class Plan:
    schedule: str         # gpipe, 1f1b, ..., as the plan names it
    stages: List[Stage]
    microbatches: int
    microbatch_size: int
    name: str = ""        # as pipetrain names it (planner::planName): "1f1b, 2 stages (1 + 1)"

    def describe(self) -> str:
        return f"{self.name}, {self.microbatches} micro-batches of {self.microbatch_size}"

    @staticmethod
    def from_json(j: dict, name: str) -> "Plan":
        schedule = j["schedule"]["name"] if isinstance(j["schedule"], dict) else j["schedule"]
        return Plan(schedule, [Stage(list(s["layers"]), list(s["devices"])) for s in j["stages"]],
                    int(j["microbatches"]), int(j["microbatch_size"]), name)


@dataclasses.dataclass(frozen=True)
class Rank:
    rank: int
    device: str
    data_channel: str
    bubble_fraction: float
    predicted_bubble_fraction: float
    peak_memory_bytes: int
    peak_device_memory_bytes: Optional[int]


@dataclasses.dataclass(frozen=True)
class Summary:
    model: str
    plan: Plan
    world_size: int
    samples: int
    samples_per_second: float            # measured, over the training steps
    predicted_samples_per_second: float  # the simulator's, from the run's own stage times
    wall_seconds: float
    final_loss: float
    test_loss: Optional[float]
    test_accuracy: Optional[float]
    ranks: List[Rank]
    json: dict = dataclasses.field(repr=False)  # everything the run wrote

    @staticmethod
    def read(path: str) -> "Summary":
        try:
            with open(path) as f:
                j = json.load(f)
        except (OSError, ValueError) as e:
            raise PipetrainError(f"{path}: not a run summary: {e}") from e
        if j.get("format") != "pipetrain.train-summary":
            raise PipetrainError(f"{path}: not a run summary (format {j.get('format')!r})")
        ranks = [Rank(r["rank"], r.get("device", ""), r.get("data_channel", ""), r["bubble_fraction"],
                      r.get("predicted_bubble_fraction", 0.0), r.get("peak_memory_bytes", 0),
                      r.get("peak_device_memory_bytes")) for r in j["ranks"]]
        return Summary(j["model"], Plan.from_json(j["plan"], j["plan_name"]), j["world_size"], j["samples"], j["throughput"],
                       j["predicted_throughput"], j["wall_seconds"], j["final_loss"], j.get("test_loss"),
                       j.get("test_accuracy"), ranks, j)
