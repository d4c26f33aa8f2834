#!/usr/bin/env bash
# Regenerates examples/graphs (profiles of vgg16, resnet50 and gpt, and of the DAG models
# multimodal, dlrm, candle-uno and fmnist-branch at their default sizes, on this machine) and
# examples/plans (the plan `pipetrain plan` chooses for each on each example cluster).
# Usage: scripts/example_plans.sh [build-dir] [--keep-graphs]
set -euo pipefail
build=${1:-build}
bin="$build/pipetrain"
mkdir -p examples/graphs examples/plans
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

profile() {  # profile MODEL BATCH OPTIONS...
  local model=$1 batch=$2; shift 2
  local opts=()
  for o in "$@"; do opts+=(--model-option "$o"); done
  "$bin" profile --model "$model" "${opts[@]}" --batch "$batch" --warmup 1 --repeats 3 \
    --out "examples/graphs/$model.json" >/dev/null
  echo "profiled $model -> examples/graphs/$model.json"
}
if [ "${2:-}" != "--keep-graphs" ]; then
  profile vgg16 8 image_size=224
  profile resnet50 8 image_size=224
  profile gpt 4 layers=12 width=768 heads=12 context=256
  for model in multimodal dlrm candle-uno fmnist-branch; do profile "$model" 16; done
fi

printf '%-10s %-22s %-12s %-7s %-16s %6s %5s %14s\n' model cluster schedule stages "stages x repl" mb m samples/s
for graph in examples/graphs/*.json; do
  model=$(basename "$graph" .json)
  for cluster in examples/clusters/*.json; do
    name=$(basename "$cluster" .json)
    "$bin" plan --graph "$graph" --cluster "$cluster" --batch 256 \
      --out "examples/plans/${model}_$name.json" --json >"$tmp"
    python3 - "$model" "$name" "$tmp" <<'PY'
import json, sys
j = json.load(open(sys.argv[3]))
reps = [s["replicas"] for s in j["stages"]]
shape = "+".join(f"1x{r}" for r in reps) if len(reps) <= 3 else f"{min(reps)}-{max(reps)} each"
print(f"{sys.argv[1]:<10} {sys.argv[2]:<22} {j['schedule']:<12} {len(j['stages']):<7} {shape:<16} "
      f"{j['microbatch_size']:>6} {j['microbatches']:>5} {j['predicted_throughput']:>14.1f}")
PY
  done
done
