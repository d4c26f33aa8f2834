#!/usr/bin/env bash
# Side-by-side throughput on this machine: the same model and global batch trained
# (a) in one process using all cores, (a1) in one process on one core (one device's
# worth of compute: the baseline of the ideal pipeline speedup 2m/(m+1)), (b) as 2
# pipeline stages (one core each) under gpipe, 1f1b and zb-h1, and (c) on 2 ranks as
# the planner chooses (it may pick data parallelism). Prints samples/s and the ratios.
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

run() {  # run NAME NPROC EXTRA-ARGS...
  local name=$1 nproc=$2; shift 2
  "$bin" train "${common[@]}" --nproc "$nproc" "$@" --summary-json "$out/$name.json" >/dev/null
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["throughput"])' "$out/$name.json"
}
row() {  # row LABEL SAMPLES/S
  printf '%-30s %12.1f %10s %10s\n' "$1" "$2" "$(awk -v t="$2" -v b="$base" 'BEGIN { printf "%.2f", t / b }')" \
    "$(awk -v t="$2" -v b="$core" 'BEGIN { printf "%.2f", t / b }')"
}

base=$(run single 1)
core=$(run single-core 1 --cores 1)
printf '%-30s %12s %10s %10s\n' "run ($model, m=8, b=32)" "samples/s" "vs (a)" "vs (a1)"
row "(a) 1 process, all cores" "$base"
row "(a1) 1 process, 1 core" "$core"
for s in gpipe 1f1b zb-h1; do
  row "(b) 2 stages, $s" "$(run "$s" 2 --schedule "$s" --no-replication)"
done
row "(c) 2 ranks, planner's choice" "$(run planned 2)"

