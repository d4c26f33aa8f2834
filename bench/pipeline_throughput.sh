#!/usr/bin/env bash
# Side-by-side throughput on this machine: the same model and global batch trained
# (a) in one process using all cores, and (b) as 2 pipeline stages (one core each)
# under gpipe, 1f1b and zb-h1. Prints samples/s and the ratio to (a).
# Usage: bench/pipeline_throughput.sh [build-dir] [model] [steps]
set -euo pipefail
build=${1:-build}
model=${2:-mlp}
steps=${3:-30}
bin="$build/pipetrain"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

case "$model" in
  mlp) args=(--model mlp --model-option layers=8 --model-option width=1024 --model-option input=1024 --dataset synthetic) ;;
  gpt) args=(--model gpt --model-option layers=8 --model-option width=256 --model-option heads=4
             --model-option context=64 --dataset fortunes) ;;
  *) echo "unknown model $model (mlp or gpt)" >&2; exit 2 ;;
esac
common=("${args[@]}" --microbatches 8 --microbatch-size 32 --epochs 1 --max-steps "$steps" --no-eval --optimizer sgd --lr 0.01)

run() {  # run NAME NPROC SCHEDULE
  "$bin" train "${common[@]}" --nproc "$2" --schedule "$3" --summary-json "$out/$1.json" >/dev/null
  grep -o '"throughput": [0-9.e+-]*' "$out/$1.json" | sed 's/.*: //'
}

base=$(run single 1 1f1b)
printf '%-28s %12s %8s\n' "run ($model, m=8, b=32)" "samples/s" "ratio"
printf '%-28s %12.1f %8.2f\n' "1 process, all cores" "$base" 1
for s in gpipe 1f1b zb-h1; do
  t=$(run "$s" 2 "$s")
  printf '%-28s %12.1f %8s\n' "2 stages, $s" "$t" "$(awk -v t="$t" -v b="$base" 'BEGIN { printf "%.2f", t / b }')"
done
