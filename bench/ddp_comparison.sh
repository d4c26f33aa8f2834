#!/usr/bin/env bash
# pipetrain against the peer a user would pick instead: PyTorch's DDP (the pinned torch of
# .venv under its own torchrun, Gloo, 2 processes, torchrun's one thread each;
# bench/race/ddp_peer.py) on the same MLP file (bench/race/race_models.py: input 1024,
# 8 x 1024, 10 classes, the file pipetrain trains too), global batch 256, SGD, beside
# pipetrain's data parallelism (1 stage x 2 replicas, micro-batches 2 x 128), a 2-stage
# 1F1B pipeline (8 x 32, cut after fc3: four layers of the eight and the head on the
# other side), the same cut under PipeDream's asynchronous 1F1B (2 x 128: stale weights,
# not synchronous SGD) and the plan pipetrain chooses for 2 ranks (`--batch 256`:
# schedule, stages, replicas and micro-batching; synchronous schedules only, and again
# with --allow-async, where the asynchronous schedules compete too), and beside what two
# cores can do at most: twice the throughput of one process training the whole batch on
# one core (256 samples as 2 x 128, so each core does a replica's work without an
# all-reduce). Every run counts every step (barrier to barrier for DDP, as pipetrain's
# summary does). The configurations alternate, REPEATS rounds; prints each one's median
# samples/s, its range and the ratios to DDP and to the two cores' ceiling. (The race
# against torch.distributed.pipelining, with DDP beside it on three models:
# bench/race/race.py.)
# Usage: bench/ddp_comparison.sh [build-dir] [repeats] [steps]
set -euo pipefail
build=${1:-build}
repeats=${2:-5}
steps=${3:-30}
bin="$build/pipetrain"
here=$(cd "$(dirname "$0")" && pwd)
python=${PIPETRAIN_PYTHON:-$here/../.venv/bin/python}  # the pinned torch (make deps)
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "needs $python with torch: run make deps (requirements-torch.txt)" >&2
  exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$python" "$here/race/race_models.py" mlp "$out" --samples $((256 * steps))
model=(--model-file "$out/mlp.pt" --data-file "$out/mlp.data.pt" --epochs 1 --max-steps "$steps" --no-eval
       --optimizer sgd --lr 0.01)
pipetrain() {  # pipetrain ARGS...: samples/s of one run
  "$bin" train "${model[@]}" "$@" --summary-json "$out/s.json" >"$out/log" 2>&1 || { cat "$out/log" >&2; exit 1; }
  "$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["throughput"])' "$out/s.json"
}
names=("DDP (PyTorch 2.11, torchrun)" "pipetrain data parallel" "pipetrain 2-stage 1f1b"
       "pipetrain's plan" "2 x one process, one core" "pipetrain 2-stage pipedream" "pipetrain's plan, async allowed")
ddp() {
  "$(dirname "$python")/torchrun" --standalone --nproc-per-node 2 "$here/race/ddp_peer.py" --model-file "$out/mlp.pt" \
    --data-file "$out/mlp.data.pt" --batch 256 --steps "$steps" 2>/dev/null |
    "$python" -c 'import json, sys; print(json.loads(sys.stdin.read().splitlines()[-1])["samples_per_second"])'
}
run() {  # run INDEX
  case $1 in
    0) ddp ;;
    1) pipetrain --nproc 2 --data-parallel --microbatches 2 --microbatch-size 128 ;;
    2) pipetrain --nproc 2 --schedule 1f1b --stage-bounds 0,4,9 --microbatches 8 --microbatch-size 32 ;;
    3) pipetrain --nproc 2 --batch 256 --plan-out "$out/chosen.json" ;;
    4) pipetrain --nproc 1 --cores 1 --microbatches 2 --microbatch-size 128 | awk '{ print 2 * $1 }' ;;
    5) pipetrain --nproc 2 --schedule pipedream --stage-bounds 0,4,9 --microbatches 2 --microbatch-size 128 ;;
    6) pipetrain --nproc 2 --batch 256 --allow-async --plan-out "$out/chosen_async.json" ;;
  esac
}
for ((r = 0; r < repeats; ++r)); do
  for i in "${!names[@]}"; do run "$i" >>"$out/$i"; done
done

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f %.1f %.1f", m, v[1], v[NR] }'; }
read -r ddp _ _ <<<"$(median "$out/0")"
read -r ceiling _ _ <<<"$(median "$out/4")"
printf '%-32s %10s %20s %8s %12s\n' "mlp 8x1024, batch 256" "samples/s" "range" "vs DDP" "vs ceiling"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
for i in "${!names[@]}"; do
  read -r m lo hi <<<"$(median "$out/$i")"
  printf '%-32s %10.1f %20s %8s %12s\n' "${names[$i]}" "$m" "$lo-$hi" "$(ratio "$m" "$ddp")" "$(ratio "$m" "$ceiling")"
done
describe() {  # describe PLAN-FILE: schedule, stages and micro-batching of a plan
  local plan
  plan=$(tr -d ' \n' <"$1")
  field() { grep -o "\"$1\":[^,}]*" <<<"$plan" | head -1 | sed 's/.*://; s/"//g'; }
  echo "$(field name), $(grep -o '"layers"' <<<"$plan" | wc -l) stage(s), micro-batch $(field microbatch_size) x $(field microbatches)"
}
echo "(median of $repeats alternating runs, $steps steps each; the last plans chosen: $(describe "$out/chosen.json");" \
  "async allowed: $(describe "$out/chosen_async.json"))"
