#!/usr/bin/env bash
# `make demo`: the worked example. Simulates the 4-stage transformer plan under every
# schedule, then draws 1F1B and ZB-H1 as Gantt charts and a Perfetto trace.
set -euo pipefail
build=${1:-build}
bin="$build/pipetrain"
ex=examples/transformer
out=out/demo
mkdir -p "$out"

"$bin" simulate --graph $ex/graph.json --cluster $ex/cluster.json --plan $ex/plan.json \
  --svg "$out/transformer_1f1b.svg" --trace "$out/transformer_1f1b.trace.json"
echo
echo "Bubble fraction of every schedule at p=4, m=8 (equal stages, F=1, B=2 of which W=1):"
printf '  %-12s %10s %14s\n' schedule bubble "iteration (s)"
for s in gpipe 1f1b pipedream 2bw pipemare interleaved zb-h1; do
  extra=""
  [ "$s" = interleaved ] && extra="--chunks 2"
  json=$("$bin" simulate --schedule $s --stages 4 --microbatches 8 --uniform 1,2,1 $extra --json)
  bubble=$(echo "$json" | grep -m1 '"bubble_fraction"' | sed 's/.*: \([0-9.e-]*\).*/\1/')
  iter=$(echo "$json" | grep -m1 '"iteration_time"' | sed 's/.*: \([0-9.e-]*\).*/\1/')
  printf '  %-12s %10.4f %14.4g\n' "$s" "$bubble" "$iter"
  "$bin" simulate --schedule $s --stages 4 --microbatches 8 --uniform 1,2,1 $extra --svg "$out/$s.svg" >/dev/null
done
echo
echo "Gantt charts: $out/*.svg   Perfetto trace: $out/transformer_1f1b.trace.json"
