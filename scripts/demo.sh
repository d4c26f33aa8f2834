#!/usr/bin/env bash
# `make demo`: the main job. Simulates the worked example under every schedule, then
# trains fmnist-cnn on Fashion-MNIST as a 2-stage 1F1B pipeline (two processes over
# Gloo) and checks the test accuracy.
set -euo pipefail
build=${1:-build}
bin="$build/pipetrain"
ex=examples/transformer
out=out/demo
mkdir -p "$out"

echo "== Simulated: the 12-layer transformer example on 4 GPUs (examples/transformer)"
"$bin" simulate --graph $ex/graph.json --cluster $ex/cluster.json --plan $ex/plan.json \
  --svg "$out/transformer_1f1b.svg" --trace "$out/transformer_1f1b.trace.json"
echo
echo "Bubble fraction of every schedule at p=4, m=8 (equal stages, F=1, B=2 of which W=1):"
printf '  %-12s %10s %14s\n' schedule bubble "iteration (s)"
for s in gpipe 1f1b pipedream 2bw pipemare interleaved zb-h1; do
  extra=""
  [ "$s" = interleaved ] && extra="--chunks 2"
  json=$("$bin" simulate --schedule $s --stages 4 --microbatches 8 --uniform 1,2,1 $extra --json --svg "$out/$s.svg")
  bubble=$(echo "$json" | grep -m1 '"bubble_fraction"' | sed 's/.*: \([0-9.e-]*\).*/\1/')
  iter=$(echo "$json" | grep -m1 '"iteration_time"' | sed 's/.*: \([0-9.e-]*\).*/\1/')
  printf '  %-12s %10.4f %14.4g\n' "$s" "$bubble" "$iter"
done

echo
echo "== Planned: a profiled GPT (examples/graphs/gpt.json) on a 4-node GPU cluster: schedule, stages,"
echo "   replicas and micro-batch chosen together, scored by the simulator"
"$bin" plan --graph examples/graphs/gpt.json --cluster examples/clusters/gpu-cluster-4-nodes.json --batch 256 \
  --top 5 --out "$out/gpt_planned.json"

echo
echo "== Trained: fmnist-cnn on Fashion-MNIST, 2 stages, 1F1B, 8 micro-batches of 32"
# The planner splits the model after profiling it; --no-replication keeps it a two-stage
# pipeline (on two CPU ranks it would otherwise often prefer two data-parallel replicas).
"$bin" train --model fmnist-cnn --dataset fashion-mnist --nproc 2 --schedule 1f1b --no-replication \
  --microbatches 8 --microbatch-size 32 --epochs 2 \
  --trace "$out/fmnist_1f1b.trace.json" --svg "$out/fmnist_1f1b.svg" --summary-json "$out/fmnist_summary.json"
accuracy=$(grep -o '"test_accuracy": [0-9.]*' "$out/fmnist_summary.json" | sed 's/.*: //')
if awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.85) }'; then
  echo "test accuracy $accuracy >= 0.85: ok"
else
  echo "test accuracy $accuracy is below 0.85" >&2
  exit 1
fi
echo
echo "== Trained asynchronously: the same model under PipeDream (no flush, a step after every"
echo "   backward pass, weight stashing), 60 mini-batches; the report shows the versions each rank held"
"$bin" train --model fmnist-cnn --dataset fashion-mnist --nproc 2 --schedule pipedream --no-replication \
  --microbatches 8 --microbatch-size 32 --epochs 1 --max-steps 60 --summary-json "$out/fmnist_pipedream_summary.json"
echo
echo "Pictures: $out/*.svg   Perfetto traces: $out/*.trace.json   Summary: $out/fmnist_summary.json"
