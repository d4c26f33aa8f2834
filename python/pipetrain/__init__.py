"""pipetrain from Python: train a PyTorch model with pipeline parallelism on pipetrain's
ranks and get it back trained, and plan, schedule and simulate as the CLI does.

    import pipetrain
    run = pipetrain.train(model, {"input_ids": ids, "labels": ids}, nproc=2, batch=16, output="logits")
    run.model        # your module, trained
    run.summary      # throughput, plan, losses, per rank
    pipetrain.schedule("zb-h1", stages=4, microbatches=8)   # renders its Gantt chart in Jupyter

Python is the front door: the ranks are processes of the C++ runtime (the `pipetrain`
executable, found in $PIPETRAIN_BIN, the checkout's build/ or PATH). Errors raise
PipetrainError with pipetrain's one-line message."""
from ._binary import PipetrainError, train_options
from ._planning import Candidate, PlanChoice, Program, Simulation, plan, schedule, simulate
from ._summary import Plan, Rank, Stage, Summary
from ._train import Run, train

__all__ = ["train", "Run", "Summary", "Plan", "Stage", "Rank", "plan", "PlanChoice", "Candidate", "schedule",
           "Program", "simulate", "Simulation", "PipetrainError", "train_options"]
