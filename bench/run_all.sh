#!/usr/bin/env bash
# Runs every benchmark in bench/ against the build in $1 (default: build).
set -euo pipefail
build=${1:-build}
"$build/simulator_bench" --benchmark_counters_tabular=true
"$build/planner_bench" --benchmark_counters_tabular=true
bench/pipeline_throughput.sh "$build" mlp
bench/pipeline_throughput.sh "$build" gpt
bench/prediction_accuracy.sh "$build" 2
# The runs people start, as they start them: planner against measurement, throughput and memory.
if [ -x .venv/bin/python ]; then python3 bench/prediction_cases.py --build "$build" --rounds 3; fi
for model in mlp gpt fmnist-cnn; do bench/profile_vs_run.sh "$build" 3 "$model"; done
python=${PIPETRAIN_PYTHON:-.venv/bin/python}  # the pinned torch (make deps)
if "$python" -c "import torch" 2>/dev/null; then "$python" bench/noise_floor.py 120 2; fi
# The race against torch.distributed.pipelining and DDP (docs/runtime.md), on one model of
# each kind; bench/race/race.py with no arguments races them all (hours).
if "$python" -c "import torch" 2>/dev/null; then
  "$python" bench/race/race.py --build "$build" --models gpt,hf-gpt2 --nproc 2 --runs 1f1b,ddp,plan --peer-best 1f1b
fi
if [ -x /usr/bin/python3 ]; then bench/graph_comparison.sh "$build"; fi
# GraphPipe's comparison at its paper's sizes, and the example graphs (docs/planner.md).
if [ -x /usr/bin/python3 ]; then /usr/bin/python3 bench/graphpipe/graphpipe_bench.py --build "$build"; fi
# Recomputation where memory binds (docs/planner.md#recomputation): predicted, then measured.
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 bench/recompute/recompute_bench.py --build "$build"
  /usr/bin/python3 bench/recompute/measured.py --build "$build" --rounds 3 --rank-memory 140MiB --schedule 1f1b
fi
