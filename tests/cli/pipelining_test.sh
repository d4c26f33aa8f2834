#!/usr/bin/env bash
# The cross-check against torch.distributed.pipelining: from the same model and weights
# and the same batches, K steps of 1F1B in PyTorch's pipelining (under torchrun, over
# Gloo, stages of the eager model's own modules) and in pipetrain (the layers it trains:
# the zoo's scripted file, or a Hugging Face Llama captured through torch.export) end
# with the same parameters, within fp32 tolerance. Each dataset is exactly one
# mini-batch, so both train on the same samples at every step (pipetrain shuffles its
# order, which permutes the micro-batches of a mean only).
# Usage: PIPETRAIN=path/to/pipetrain pipelining_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"
torchrun=$(dirname "$python")/torchrun
race=$src/bench/race

same_parameters() {  # same_parameters PEER.pt PIPETRAIN.pt START.pt: what trained is equal, and moved
  PYTHONPATH=$src/python "$python" - "$@" <<'PY'
import sys
import torch
from pipetrain_capture import state_dict
peer = torch.load(sys.argv[1])
scripted = torch.jit.load(sys.argv[2])
ours = state_dict(sys.argv[2]) if hasattr(scripted, "pipetrain_state_dict") else scripted.state_dict()
start = torch.load(sys.argv[3])  # the eager model's state_dict, under the user's names
moved = {n: (p - start[n]).abs().max().item() for n, p in peer.items() if p.is_floating_point()}
trained = {n for n, m in moved.items() if m > 0}  # the parameters (buffers such as a rotary table stay)
assert trained, "the peer trained nothing"
ours_trained = {n for n, p in ours.items() if n in start and p.is_floating_point() and not torch.equal(p, start[n])}
assert ours_trained == trained, f"trained tensors differ: {sorted(ours_trained ^ trained)}"
for name in sorted(trained):
    differ = (peer[name] - ours[name]).abs().max().item()
    # fp32: the two sum the same products in other orders. Tolerance relative to how far
    # training moved the tensor, so that an untrained or wrongly trained one fails.
    assert differ <= 1e-3 * moved[name] + 1e-7, f"{name}: differs by {differ:.3g}, training moved it {moved[name]:.3g}"
print(f"{len(trained)} trained tensors equal")
PY
}

cross_check() {  # cross_check MODEL NPROC BOUNDS MICROBATCHES SIZE STEPS (BOUNDS in the model's pieces)
  local model=$1 nproc=$2 bounds=$3 m=$4 b=$5 steps=$6
  check "$model: the model and one mini-batch of data" "$python" "$race/race_models.py" "$model" "$tmp" \
    --samples $((m * b))
  check "$model: $steps steps of Schedule1F1B on $nproc ranks" "$torchrun" --nproc-per-node "$nproc" \
    --standalone "$race/pipelining_peer.py" --model "$model" --dir "$tmp" \
    --schedule Schedule1F1B --stage-bounds "$bounds" --microbatches "$m" --microbatch-size "$b" --steps "$steps" \
    --lr 0.05 --timeout 120 --save-params "$tmp/peer.pt"
  local layers  # the same cuts in pipetrain's layers
  layers=$("$python" -c "import json, sys; b = json.load(open(sys.argv[1]))['layer_bounds']
print(','.join(str(b[int(i)]) for i in sys.argv[2].split(',')))" "$tmp/$model.pieces.json" "$bounds")
  check "$model: $steps steps of pipetrain's 1f1b on $nproc ranks" "$bin" train --model-file "$tmp/$model.pt" \
    --data-file "$tmp/$model.data.pt" --nproc "$nproc" --schedule 1f1b --stage-bounds "$layers" \
    --microbatches "$m" --microbatch-size "$b" --optimizer sgd --lr 0.05 --epochs "$steps" --no-eval \
    --timeout 120 --export "$tmp/ours.pt"
  check "$model: the same parameters" same_parameters "$tmp/peer.pt" "$tmp/ours.pt" "$tmp/$model.eager.pt"
}

cross_check mlp 2 0,4,9 4 8 5
cross_check gpt 3 0,2,4,6 3 4 4
cross_check hf-llama 2 0,3,6 4 4 3

finish pipelining_test
