#!/usr/bin/env bash
# Models as people write them, from the README's commands: torchvision's resnet18 and a
# GPT-2-style model with tied embeddings are captured by python/pipetrain_capture.py,
# trained from the CLI on 2 and 3 ranks, exported, and loaded back into their original
# classes with load_state_dict, where they score the test split as pipetrain did.
# Usage: PIPETRAIN=path/to/pipetrain asis_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
capture=$src/python/pipetrain_capture.py
. "$(dirname "$0")/harness.sh"

check "the data" "$python" "$src/examples/asis/make_data.py" "$tmp"
check "capture resnet18" "$python" "$capture" capture 'torchvision.models:resnet18(num_classes=10)' \
  --data-file "$tmp/fmnist_rgb.pt" --out "$tmp/resnet18.pt"
expect "resnet18's blocks are layers" "14 layers (conv1, bn1, relu, maxpool, ...)"
check "capture the GPT" "$python" "$capture" capture "$src/examples/asis/gpt2.py:GPT(GPTConfig())" \
  --data-file "$tmp/fortunes.pt" --out "$tmp/gpt2.pt"

# train NAME MODEL DATA RANKS [ARGS...]: trains, exports, and turns the export into a state_dict.
train() {
  local name=$1 model=$2 data=$3 ranks=$4; shift 4
  check "$name trains" "$bin" train --model-file "$tmp/$model.pt" --data-file "$tmp/$data.pt" --nproc "$ranks" \
    --epochs 1 --max-steps 6 --export "$tmp/$name.pt" --summary-json "$tmp/$name.json" "$@"
  cp "$tmp/out" "$tmp/$name.out"
  expect "$name exported" "exported the trained model to $tmp/$name.pt" "$tmp/$name.out"
  check "$name as a state_dict" "$python" "$capture" state-dict "$tmp/$name.pt" --out "$tmp/$name.sd.pt"
}
# score NAME CLASS-EXPRESSION: the original class loads the state_dict and scores the test split as pipetrain did.
score() {
  check "$1 loads into its class and scores as pipetrain did" "$python" - "$src" "$tmp/$1" "$2" <<'PY'
import json, sys
import torch
import torch.nn.functional as F
src, run, make = sys.argv[1:4]
sys.path.insert(0, f"{src}/examples/asis")
import torchvision
from gpt2 import GPT, GPTConfig
model = eval(make)
state = torch.load(f"{run}.sd.pt")
model.load_state_dict(state, strict=True)
if "lm_head.weight" in state:  # tied: both names hold the same trained values
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])
data = torch.load(f"{run.rsplit('/', 1)[0]}/{'fortunes' if 'GPT' in make else 'fmnist_rgb'}.pt")
model.eval()
with torch.no_grad():
    out = model(data["test_inputs"])
labels = data["test_labels"]
accuracy = (out.argmax(-1) == labels).float().mean().item()
loss = F.cross_entropy(out.flatten(0, -2), labels.flatten()).item()
summary = json.load(open(f"{run}.json"))
print(f"python: accuracy {accuracy:.6f} loss {loss:.6f}; pipetrain: {summary['test_accuracy']:.6f} {summary['test_loss']:.6f}")
assert abs(accuracy - summary["test_accuracy"]) < 1e-6, "accuracy differs"
assert abs(loss - summary["test_loss"]) < 1e-4, "loss differs"
PY
}

train resnet-2 resnet18 fmnist_rgb 2 --batch 32
check "resnet18 in micro-batches" "$bin" train --model-file "$tmp/resnet18.pt" --data-file "$tmp/fmnist_rgb.pt" \
  --nproc 2 --stage-bounds 0,7,14 --microbatches 2 --microbatch-size 8 --epochs 1 --max-steps 1 --no-eval
expect "batch norm per micro-batch is said" "use batch norm ('bn1', ...), whose statistics here are per micro-batch of 8"
score resnet-2 'torchvision.models.resnet18(num_classes=10)'
train resnet-3 resnet18 fmnist_rgb 3 --batch 48
score resnet-3 'torchvision.models.resnet18(num_classes=10)'
train gpt-2 gpt2 fortunes 2 --batch 32
score gpt-2 'GPT(GPTConfig())'
# A pipeline of 3 stages: the embedding on the first, the output layer on the last.
train gpt-3 gpt2 fortunes 3 --batch 48 --schedule 1f1b --no-replication
expect "the GPT on 3 stages" "chosen: 1f1b, 3 stages" "$tmp/gpt-3.out"
score gpt-3 'GPT(GPTConfig())'
check "the planner leaves asynchronous schedules out for tied layers" "$bin" train --model-file "$tmp/gpt2.pt" \
  --data-file "$tmp/fortunes.pt" --nproc 2 --batch 32 --allow-async --epochs 1 --max-steps 2 --no-eval
expect "it says why" "layers 'transformer_wte' and 'lm_head' share a weight, so asynchronous schedules are considered only with them on one stage"
check "pipedream asked for, the planner keeps the tied layers on one stage" "$bin" train --model-file "$tmp/gpt2.pt" \
  --data-file "$tmp/fortunes.pt" --nproc 2 --batch 32 --schedule pipedream --epochs 1 --max-steps 2 --no-eval
expect "one replicated stage" "chosen: pipedream, 1 stages (1x2)"
# (--no-replication: two stages, so no plan keeps them together: the planner says so.)
refuses "tied layers apart under an asynchronous schedule" "share a weight and would sit on different stages" \
  "$bin" train --model-file "$tmp/gpt2.pt" --data-file "$tmp/fortunes.pt" --nproc 2 --batch 32 --schedule pipedream \
  --no-replication --epochs 1 --max-steps 2

# More of torchvision, as written: each captures (checked against its forward()), and
# a ViT's encoder opens into its blocks, so the planner has blocks to balance.
check "torchvision's classifiers capture" "$python" - "$capture" "$tmp" <<'PY'
import importlib.util, sys
import torch, torchvision
spec = importlib.util.spec_from_file_location("capture", sys.argv[1])
capture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capture)
M = torchvision.models
vit = M.vision_transformer.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                             mlp_dim=64, num_classes=10)
small_densenet = M.densenet.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16, num_classes=10)
models = {"vit": vit, "densenet": small_densenet, "mobilenet_v2": M.mobilenet_v2(num_classes=10),
          "regnet": M.regnet_y_400mf(num_classes=10),
          "googlenet": M.googlenet(num_classes=10, aux_logits=False, init_weights=True)}
for name, model in models.items():
    scripted = capture.capture(model, torch.randn(3, 3, 32, 32), f"{sys.argv[2]}/{name}.pt")
    print(name, list(scripted.pipetrain_inputs))
# EfficientNet's stochastic depth (StochasticDepth: a Bernoulli draw per sample, taken
# only in training mode) is captured as dropout is, following the layers' train()/eval():
# the check compares both modes.
capture.capture(M.efficientnet_b0(num_classes=10), torch.randn(3, 3, 32, 32))
assert "encoder_layers_encoder_layer_1" in vit_layers if (vit_layers := list(torch.jit.load(f"{sys.argv[2]}/vit.pt").pipetrain_inputs)) else False
torch.save({"inputs": torch.randn(64, 3, 32, 32), "labels": torch.randint(0, 10, (64,))}, f"{sys.argv[2]}/images.pt")
PY
train vit-2 vit images 2 --batch 16
# DenseNet's last block sees 1 x 1 maps at 32 x 32: BatchNorm cannot train on one sample,
# so the profile keeps micro-batches of 2 or more, and says why.
train densenet-2 densenet images 2 --batch 4
expect "micro-batches of one refused, with the layer" "note: micro-batches of 2 samples or more: layer 'features_" "$tmp/densenet-2.out"

# What cannot be captured says which operation and what to change.
cat >"$tmp/branchy.py" <<'PY'
import torch
from torch import nn
class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
    def forward(self, x):
        if x.sum() > 0:
            return self.a(x)
        return x
class NoGradScale(nn.Module):
    """A scale computed under torch.no_grad() between two layers: no gradient through it."""
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)
    def forward(self, x):
        h = self.a(x)
        with torch.no_grad():
            scale = h.abs().amax(dim=1, keepdim=True) + 1
        return self.c(self.b(h / scale))
class Autocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.a(x)
        return y.float()
class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
    def forward(self, x, y):
        return self.a(x) + y
PY
check "small data" "$python" -c "import torch; torch.save({'inputs': torch.randn(8, 4), 'labels': torch.zeros(8, dtype=torch.long)}, '$tmp/small.pt')"
refuses "a branch on a traced value" "forward() branches on a tensor's values at $tmp/branchy.py:8" \
  "$python" "$capture" capture "$tmp/branchy.py:Branchy()" --data-file "$tmp/small.pt" --out "$tmp/x.pt"
# A torch.no_grad() block is inlined, its results detached: the capture's own check of
# every parameter's gradient fails if a gradient flows through it, or if none reaches a.
check "a torch.no_grad() block in forward()" "$python" "$capture" capture "$tmp/branchy.py:NoGradScale()" \
  --data-file "$tmp/small.pt" --out "$tmp/nograd.pt"
refuses "an autocast region" "forward() runs wrap_with_autocast" \
  "$python" "$capture" capture "$tmp/branchy.py:Autocast()" --data-file "$tmp/small.pt" --out "$tmp/x.pt"
refuses "two inputs" "forward() takes 2 inputs (x, y)" \
  "$python" "$capture" capture "$tmp/branchy.py:TwoInputs()" --data-file "$tmp/small.pt" --out "$tmp/x.pt"
refuses "state-dict of a missing file" "no such file" "$python" "$capture" state-dict "$tmp/missing.pt" --out "$tmp/x.pt"
check "a TorchScript file of its own" "$python" -c "import torch; torch.jit.script(torch.nn.Linear(4, 4)).save('$tmp/plain.pt')"
refuses "state-dict of a file not captured" "was not captured by pipetrain_capture" \
  "$python" "$capture" state-dict "$tmp/plain.pt" --out "$tmp/x.pt"
refuses "not MODULE:EXPRESSION" "give MODULE:EXPRESSION" \
  "$python" "$capture" capture "torchvision.models" --data-file "$tmp/small.pt" --out "$tmp/x.pt"

finish "cli models as written"
