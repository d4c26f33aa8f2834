#!/usr/bin/env bash
# The cross-check against torch.distributed.pipelining: from the same TorchScript file
# and the same batches, K steps of 1F1B in PyTorch's pipelining (under torchrun, over
# Gloo) and in pipetrain end with the same parameters, within fp32 tolerance. Each
# dataset is exactly one mini-batch, so both train on the same samples at every step
# (pipetrain shuffles its order, which permutes the micro-batches of a mean only).
# Usage: PIPETRAIN=path/to/pipetrain pipelining_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"
torchrun=$(dirname "$python")/torchrun
race=$src/bench/race

same_parameters() {  # same_parameters PEER.pt PIPETRAIN.pt START.pt: equal, and both moved from the start
  "$python" - "$@" <<'PY'
import sys
import torch
peer = torch.load(sys.argv[1])
ours = torch.jit.load(sys.argv[2]).state_dict()
start = torch.jit.load(sys.argv[3]).state_dict()
assert peer.keys() == ours.keys(), f"parameter names differ: {sorted(peer.keys() ^ ours.keys())}"
for name, p in peer.items():
    moved = (p - start[name]).abs().max().item()
    differ = (p - ours[name]).abs().max().item()
    # fp32: the two sum the same products in other orders. Tolerance relative to how far
    # training moved the tensor, so that an untrained or wrongly trained one fails.
    assert moved > 0, f"{name} did not move"
    assert differ <= 1e-3 * moved + 1e-7, f"{name}: differs by {differ:.3g}, training moved it {moved:.3g}"
print(f"{len(peer)} tensors equal")
PY
}

cross_check() {  # cross_check MODEL NPROC BOUNDS MICROBATCHES SIZE STEPS
  local model=$1 nproc=$2 bounds=$3 m=$4 b=$5 steps=$6
  check "$model: the model and one mini-batch of data" "$python" "$race/race_models.py" "$model" "$tmp" \
    --samples $((m * b))
  check "$model: $steps steps of Schedule1F1B on $nproc ranks" "$torchrun" --nproc-per-node "$nproc" \
    --standalone "$race/pipelining_peer.py" --model-file "$tmp/$model.pt" --data-file "$tmp/$model.data.pt" \
    --schedule Schedule1F1B --stage-bounds "$bounds" --microbatches "$m" --microbatch-size "$b" --steps "$steps" \
    --lr 0.05 --timeout 120 --save-params "$tmp/peer.pt"
  check "$model: $steps steps of pipetrain's 1f1b on $nproc ranks" "$bin" train --model-file "$tmp/$model.pt" \
    --data-file "$tmp/$model.data.pt" --nproc "$nproc" --schedule 1f1b --stage-bounds "$bounds" \
    --microbatches "$m" --microbatch-size "$b" --optimizer sgd --lr 0.05 --epochs "$steps" --no-eval \
    --timeout 120 --export "$tmp/ours.pt"
  check "$model: the same parameters" same_parameters "$tmp/peer.pt" "$tmp/ours.pt" "$tmp/$model.pt"
}

cross_check mlp 2 0,4,9 4 8 5
cross_check gpt 3 0,2,4,6 3 4 4

finish pipelining_test
