#!/usr/bin/env bash
# Models as the ecosystem writes them (tests/ecosystem/families.py): Hugging Face's
# GPT-2, Llama, BERT and Mixtral, timm's ViT, ResNet and EfficientNet (with stochastic depth),
# torchvision's GoogLeNet (with auxiliary classifiers), and reference-style Llama,
# nanoGPT, U-Net, residual MLP and GNMT (time-first LSTMs) files. Each family's captured
# layers match its eager model's loss and gradients (exactness.py); each is captured from
# the command line, trained on 2 and 3 ranks under the planner's choice, exported, and
# loaded back into its own class, which scores the test split as pipetrain reported.
# Usage: PIPETRAIN=path/to/pipetrain ecosystem_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"
. "$(dirname "$0")/families.sh"

check "the data" "$python" "$src/tests/ecosystem/make_data.py" "$tmp"
check "every family's layers compute forward()'s loss and gradients" "$python" "$src/tests/ecosystem/exactness.py" "$tmp"
check "the capture's rules: stochastic depth, recurrent layers, the gradient check" "$python" \
  "$src/tests/ecosystem/capture_rules.py" "$tmp"
refuses "a file calling an operator registered in Python" \
  "a TorchScript file that calls the operator pipetrain_test::scaled_tanh, which LibTorch does not have" \
  "$bin" train --model-file "$tmp/python_op.pt" --data-file "$tmp/fmnist_rgb.pt" --nproc 2 --batch 32

# The families' table, read once (importing transformers and timm costs seconds).
"$python" -c "import sys; sys.path.insert(0, '$src/tests/ecosystem')
from families import FAMILIES
for name, (expr, data) in FAMILIES.items(): print(name, data, expr)" >"$tmp/families.txt"
[ "$(wc -l <"$tmp/families.txt")" -eq 13 ] || { echo "FAIL: the families' table"; failed=$((failed + 1)); }
while read -r name data expr; do
  family "$name" "$data" "$expr" </dev/null
done <"$tmp/families.txt"
# Stochastic depth's masks, as dropout's, are drawn again exactly where a stage
# recomputes its forward pass (and both runs seed their ranks' streams alike).
for recompute in none full; do
  check "timm-efficientnet under --recompute $recompute" "$bin" train --model-file "$tmp/timm-efficientnet.pt" \
    --data-file "$tmp/fmnist_rgb.pt" --nproc 2 --stage-bounds 0,8,16 --schedule 1f1b --microbatches 2 \
    --microbatch-size 16 --epochs 1 --max-steps 3 --no-eval --recompute $recompute --summary-json "$tmp/sd-$recompute.json"
done
check "stochastic depth: the same losses recomputing or not" "$python" -c "import json, sys
losses = [json.load(open(f'$tmp/sd-{r}.json'))['final_loss'] for r in ('none', 'full')]
sys.exit(0 if losses[0] == losses[1] else f'final losses {losses}')"

check "the exports load into their classes and score as pipetrain did" "$python" \
  "$src/tests/ecosystem/score_exports.py" "$tmp"

# The cut's two harder cases: an add that two later layers read beside its layer's own
# result becomes a layer of its own; a module with weights called twice is two layers
# holding one weight.
check "a junction and a module called twice" "$python" - "$src" <<'PY'
import sys
import torch
from torch import nn
sys.path.insert(0, f"{sys.argv[1]}/python")
import pipetrain_capture as pc
class Junction(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(8, 8) for _ in range(4))
    def forward(self, x):
        h = self.a(x)
        y = self.b(h)
        j = h * 2 + y
        return self.d(j) + self.c(j) + y
class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.shared, self.out = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 3)
    def forward(self, x):
        return self.out(self.shared(torch.relu(self.shared(self.inp(x)))))
wiring = dict(pc.capture(Junction(), torch.randn(3, 8)).pipetrain_inputs)
assert wiring == {"a": ["input"], "b": ["a"], "b_add": ["a", "b"], "d": ["b_add"], "c": ["b_add", "d", "b"]}, wiring
twice = pc.capture(Twice(), torch.randn(3, 8))
assert list(twice.pipetrain_inputs) == ["inp", "shared_call0", "shared_call1", "out"], dict(twice.pipetrain_inputs)
assert twice.shared_call0.shared.weight.data_ptr() == twice.shared_call1.shared.weight.data_ptr()
PY

# One command from a model to training: train captures --model-py itself, and the next
# run takes the capture from the cache.
check "train --model-py" "$bin" train --model-py "$families:NanoGPT(layers=3)" --data-file "$tmp/fortunes.pt" \
  --nproc 2 --batch 32 --epochs 1 --max-steps 2 --no-eval
expect "it trains the captured model" "trained NanoGPT with"
check "train --model-py again" "$bin" train --model-py "$families:NanoGPT(layers=3)" --data-file "$tmp/fortunes.pt" \
  --nproc 2 --batch 32 --epochs 1 --max-steps 2 --no-eval
expect "the capture comes from the cache" "captured before" "$tmp/err"
refuses "--model-py without data" "--model-py needs --data-file" \
  "$bin" train --model-py "$families:NanoGPT()" --nproc 2 --batch 32
refuses "--model-py of a missing file" "--model-py $tmp/missing.py:Model(): $tmp/missing.py: no such file" \
  "$bin" train --model-py "$tmp/missing.py:Model()" --data-file "$tmp/fortunes.pt" --nproc 2 --batch 32
refuses "--model-py whose capture fails" "the capture failed" \
  "$bin" train --model-py "$families:NoSuchModel()" --data-file "$tmp/fortunes.pt" --nproc 2 --batch 32
refuses "a --model-py model that does not fit the data is named as the user's" \
  "model 'NanoGPT' (captured from Python as .*): its output .* does not fit the data's labels" \
  "$bin" train --model-py "$families:NanoGPT(layers=3)" --data-file "$tmp/fortunes_classes.pt" --nproc 2 --batch 32

# What a new user gets wrong is said in one line, with no traceback.
refuses_plainly() {  # refuses, and with no Python traceback
  refuses "$@"
  if grep -q Traceback "$tmp/err"; then failed=$((failed + 1)); echo "FAIL: $1: a Python traceback"; head -5 "$tmp/err"
  else passed=$((passed + 1)); fi
}
refuses_plainly "a missing model file" "error: $tmp/missing.py: no such file" \
  "$python" "$capture" capture "$tmp/missing.py:Model()" --data-file "$tmp/fortunes.pt" --out "$tmp/x.pt"
refuses_plainly "a bad expression" "is not a Python expression" \
  "$python" "$capture" capture "$families:hf_gpt2(" --data-file "$tmp/fortunes.pt" --out "$tmp/x.pt"
refuses_plainly "a missing data file" "error: $tmp/missing.pt: no such file" \
  "$python" "$capture" capture "$families:hf_gpt2()" --data-file "$tmp/missing.pt" --out "$tmp/x.pt"
refuses_plainly "an output folder that does not exist" "the folder $tmp/nowhere does not exist" \
  "$python" "$capture" capture "$families:hf_gpt2()" --data-file "$tmp/fortunes.pt" --out "$tmp/nowhere/x.pt"
refuses_plainly "data that does not fit the model" "forward() fails on the data's first inputs" \
  "$python" "$capture" capture "$families:hf_gpt2()" --data-file "$tmp/fmnist_rgb.pt" --out "$tmp/x.pt"
check "float class labels" "$python" -c "import torch; d = torch.load('$tmp/fmnist_rgb.pt'); \
torch.save({'inputs': d['inputs'][:64], 'labels': d['labels'][:64].float()}, '$tmp/float_labels.pt')"
refuses "float class labels are named as the labels' dtype" "the data's labels are float: regression targets" \
  "$bin" train --model-file "$tmp/residual-mlp.pt" --data-file "$tmp/float_labels.pt" --nproc 2 --batch 32
refuses_plainly "an output forward() does not return" "--output hidden: forward() returns" \
  "$python" "$capture" capture "$families:hf_gpt2()" --data-file "$tmp/fortunes.pt" --output hidden --out "$tmp/x.pt"

finish "cli models from the ecosystem"
