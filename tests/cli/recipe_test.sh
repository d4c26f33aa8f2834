#!/usr/bin/env bash
# The recipe people train with, against PyTorch's own: AdamW at (0.9, 0.95) with weight
# decay off for some parameters, warm-up then cosine decay to a floor, and clipping at a
# global norm, trained by pipetrain on 2 ranks and by torch.optim, lr_scheduler and
# clip_grad_norm_ in one process (recipe_reference.py), from the same weights on the same
# mini-batch: the same parameters, and the same gradient norm logged at every step. Then
# each bad recipe option is refused before any profiling, naming the option. And GPT-2's
# recipe on a token stream (bench/recipe/gpt2_recipe.py), loss for loss.
# Usage: PIPETRAIN=path/to/pipetrain recipe_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"
race=$src/bench/race

cross_check() {  # cross_check MODEL SCHEDULE BOUNDS NO_DECAY (BOUNDS in the model's pieces)
  local model=$1 schedule=$2 bounds=$3 no_decay=$4 m=4 b=4 steps=6
  local recipe=(--lr 3e-3 --weight-decay 0.1 --no-decay "$no_decay" --lr-warmup 2 --lr-min 3e-4)
  check "$model: the model and one mini-batch of data" "$python" "$race/race_models.py" "$model" "$tmp" \
    --samples $((m * b))
  local layers  # the same cuts in pipetrain's layers
  layers=$("$python" -c "import json, sys; b = json.load(open(sys.argv[1]))['layer_bounds']
print(','.join(str(b[int(i)]) for i in sys.argv[2].split(',')))" "$tmp/$model.pieces.json" "$bounds")
  check "$model: $steps steps of AdamW, cosine and clipping, $schedule on 2 ranks" "$bin" train \
    --model-file "$tmp/$model.pt" --data-file "$tmp/$model.data.pt" --nproc 2 --schedule "$schedule" \
    --stage-bounds "$layers" --microbatches "$m" --microbatch-size "$b" --epochs "$steps" --no-eval --timeout 120 \
    --optimizer adamw --betas 0.9,0.95 "${recipe[@]}" --lr-schedule cosine --clip-grad-norm 0.5 \
    --export "$tmp/ours.pt" --log-jsonl "$tmp/metrics.jsonl" --summary-json "$tmp/summary.json"
  check "$model: as torch.optim.AdamW, SequentialLR and clip_grad_norm_" "$python" "$src/tests/cli/recipe_reference.py" \
    "$model" "$tmp" "$tmp/ours.pt" "$tmp/metrics.jsonl" --steps "$steps" --lr 3e-3 --betas 0.9 0.95 \
    --weight-decay 0.1 --no-decay "$no_decay" --warmup 2 --min-lr 3e-4 --clip 0.5
  expect "$model: the summary keeps the recipe and the norms" '"clip_grad_norm": 0.5' "$tmp/summary.json"
  expect "$model: the summary keeps the norms" '"grad_norms"' "$tmp/summary.json"
}

cross_check gpt 1f1b 0,3,6 1d
# Hugging Face's Llama under Hugging Face Trainer's own no-decay rule (its norms are
# RMSNorms, which the Trainer exempts by name), on the zero-bubble schedule.
cross_check hf-llama zb-h1 0,3,6 hf

# GPT-2's recipe on a token stream (train.bin of the fortunes text, keyed window order),
# loss for loss against the PyTorch script that draws the same windows.
check "GPT-2's recipe on a token stream, loss for loss" "$python" "$src/bench/recipe/gpt2_recipe.py" --steps 12 \
  --warmup 3 --pipetrain "$bin" --out "$tmp/gpt2-recipe.json" --check 1e-5

# Data in shards (data-00000.pt, ...), read one after the other: two epochs on 2 ranks.
check "mlp: a model and 96 samples" "$python" "$race/race_models.py" mlp "$tmp" --samples 96
check "mlp: its data in three shards" "$python" -c "import sys, torch
d = torch.load(sys.argv[1])
for i, (a, b) in enumerate([(0, 40), (40, 72), (72, 96)]):
    torch.save({'inputs': d['inputs'][a:b].clone(), 'labels': d['labels'][a:b].clone()}, f'{sys.argv[2]}/data-{i:05d}.pt')
" "$tmp/mlp.data.pt" "$tmp"
check "mlp: two epochs of the shards on 2 ranks" "$bin" train --model-file "$tmp/mlp.pt" \
  --data-file "$tmp/data-00000.pt" --nproc 2 --stage-bounds 0,5,9 --microbatches 2 --microbatch-size 8 --epochs 2 \
  --timeout 60 --summary-json "$tmp/shards.json"
expect "mlp: every shard's kept samples trained, 2 epochs" '"samples": 160' "$tmp/shards.json"

# Bad recipes: refused in one line naming the option, before any profiling.
export PIPETRAIN_CACHE_DIR="$tmp/refused-cache"
base=(train --model mlp --nproc 2 --max-steps 1 --no-eval --dataset synthetic)
refuses "an unknown optimizer" "--optimizer must be one of adam, adamw, sgd" "$bin" "${base[@]}" --optimizer lamb
refuses "an unknown schedule" "--lr-schedule must be one of" "$bin" "${base[@]}" --lr-schedule cosine-restarts
refuses "a negative weight decay" "--weight-decay" "$bin" "${base[@]}" --weight-decay -0.1
refuses "clipping at 0" "--clip-grad-norm" "$bin" "${base[@]}" --clip-grad-norm 0
refuses "a no-decay rule matching nothing" "--no-decay 'layernorm' matches none" "$bin" "${base[@]}" \
  --optimizer adamw --no-decay layernorm
refuses "betas out of range" "--betas" "$bin" "${base[@]}" --betas 0.9,1.5
refuses "betas with one number" "--betas takes two numbers" "$bin" "${base[@]}" --betas 0.9
refuses "nesterov without sgd" "--nesterov" "$bin" "${base[@]}" --nesterov
[ -z "$(ls "$PIPETRAIN_CACHE_DIR" 2>/dev/null)" ] && passed=$((passed + 1)) || {
  failed=$((failed + 1)); echo "FAIL: a bad recipe was profiled before it was refused"; }

finish recipe_test
