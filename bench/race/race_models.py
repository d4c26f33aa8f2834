#!/usr/bin/env python3
"""The race's models, each built once in eager PyTorch, cut into the same stages for both
racers, and their data.

Two kinds:
- **the zoo's shapes, written here** (docs/models.md): an nn.Sequential whose children are
  the layers.
      mlp         fc0..fc7 (Linear 1024 + ReLU), head (Linear 10); input 1024
      gpt         embed (tokens + learned positions), block0..block3 (pre-LN causal
                  attention and 4x GELU MLP), head (LayerNorm + Linear); width 128,
                  4 heads, context 64, vocabulary 256
      fmnist-cnn  conv1, conv2 (conv 3x3 + ReLU + max-pool 2), flatten_fc1, fc2;
                  images (1, 28, 28)
- **models nobody here wrote**, built from configs as their users build them:
      hf-gpt2     transformers' GPT2LMHeadModel: 4 layers, width 128, 4 heads, context 64,
                  vocabulary 256, its default dropout
      hf-llama    transformers' LlamaForCausalLM: 4 layers, width 128, 4 heads of which 2
                  key-value heads, SwiGLU 344, context 64, vocabulary 256
      timm-vit    timm's vit_tiny_patch16_224 at 32 x 32 pixels, patches of 4, 4 blocks
      tv-resnet   torchvision's resnet18, 10 classes, images (3, 32, 32)
      tv-vgg      torchvision's vgg11, 10 classes, images (3, 32, 32): 129M parameters,
                  100M of them in the classifier's first layer (PipeDream's VGG-16 case)

pipetrain trains a file of layers: the zoo's scripted as it is (its children are the
layers), the others captured by python/pipetrain_capture.py (torch.export). The peers
(pipelining_peer.py, ddp_peer.py) run the eager model: DDP the whole, and
torch.distributed.pipelining stages built from its own modules as torchtitan builds them,
from **pieces**: the embedding, each block, the head, each a module of the original model
that hands one tensor on. A stage holds a run of pieces; pipetrain's stage holds the layers
captured from the same modules (`NAME.pieces.json` maps each piece to its first layer).

The data is random (the race measures speed; the cross-check compares parameters), of
`--samples` training samples and 8 test samples; or, with `--data fashion-mnist`, the
real Fashion-MNIST images (Debian's dataset-fashion-mnist) for a model of images, as
time to accuracy needs: its first `--samples` training images (every one where 0) and
its first `--test-samples` test images, normalised as pipetrain's own reader does, and
for a model of 3-channel 32-pixel images padded by 2 pixels and repeated over the
channels.

    race_models.py NAME OUT_DIR [--samples N] [--seed S] [--data fashion-mnist [--test-samples T]]

writes OUT_DIR/NAME.pt (pipetrain's layers), NAME.eager.pt (the eager model's
state_dict), NAME.pieces.json and NAME.data.pt (torch.save).
"""
import argparse
import gzip
import json
import math
import os
import sys
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LAYERS = 8  # the mlp's hidden layers


def block(*modules):
    return nn.Sequential(*modules)


def mlp(width=1024, inputs=1024, classes=10):
    children = OrderedDict()
    for i in range(LAYERS):
        children[f"fc{i}"] = block(nn.Linear(inputs if i == 0 else width, width), nn.ReLU())
    children["head"] = nn.Linear(width, classes)
    return nn.Sequential(children)


class Embed(nn.Module):
    def __init__(self, vocab: int, context: int, width: int):
        super().__init__()
        self.token = nn.Embedding(vocab, width)
        self.position = nn.Embedding(context, width)
        nn.init.normal_(self.token.weight, 0.0, 0.02)
        nn.init.normal_(self.position.weight, 0.0, 0.02)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.token(tokens) + self.position(positions)


def gpt_linear(n_in, n_out, std):
    linear = nn.Linear(n_in, n_out)
    nn.init.normal_(linear.weight, 0.0, std)
    nn.init.zeros_(linear.bias)
    return linear


class Block(nn.Module):
    """Pre-LN: causal multi-head attention, then a 4x GELU MLP, each with a residual."""

    def __init__(self, width: int, heads: int, layers: int):
        super().__init__()
        self.heads = heads
        residual_std = 0.02 / math.sqrt(2.0 * layers)  # GPT-2's scaled residual projections
        self.ln1 = nn.LayerNorm(width)
        self.qkv = gpt_linear(width, 3 * width, 0.02)
        self.proj = gpt_linear(width, width, residual_std)
        self.ln2 = nn.LayerNorm(width)
        self.fc = gpt_linear(width, 4 * width, 0.02)
        self.fc_proj = gpt_linear(4 * width, width, residual_std)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(n, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


def gpt(layers=4, width=128, heads=4, context=64, vocab=256):
    children = OrderedDict(embed=Embed(vocab, context, width))
    for i in range(layers):
        children[f"block{i}"] = Block(width, heads, layers)
    children["head"] = block(nn.LayerNorm(width), gpt_linear(width, vocab, 0.02))
    return nn.Sequential(children)


def fmnist_cnn(channels=32, hidden=128, classes=10):
    def conv(n_in, n_out):
        return block(nn.Conv2d(n_in, n_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
    return nn.Sequential(OrderedDict(
        conv1=conv(1, channels), conv2=conv(channels, 2 * channels),
        flatten_fc1=block(nn.Flatten(), nn.Linear(2 * channels * 7 * 7, hidden), nn.ReLU()),
        fc2=nn.Linear(hidden, classes)))


def hf_gpt2():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=4, n_embd=128, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0, eos_token_id=0))


def hf_llama():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=128, intermediate_size=344, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256, max_position_embeddings=64, bos_token_id=0, eos_token_id=0))


def timm_vit():
    import timm
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4, num_classes=10, depth=4)


def tv_resnet():
    import torchvision
    return torchvision.models.resnet18(num_classes=10)


def tv_vgg():
    import torchvision
    return torchvision.models.vgg11(num_classes=10)


# name: (builder, the output forward() returns to train on, the input's kind)
MODELS = {"mlp": (mlp, None, "features"), "gpt": (gpt, None, "tokens"), "fmnist-cnn": (fmnist_cnn, None, "fmnist"),
          "hf-gpt2": (hf_gpt2, "logits", "tokens"), "hf-llama": (hf_llama, "logits", "tokens"),
          "timm-vit": (timm_vit, None, "images"), "tv-resnet": (tv_resnet, None, "images"),
          "tv-vgg": (tv_vgg, None, "images")}
ZOO = ("mlp", "gpt", "fmnist-cnn")


def make(name, seed=0):
    """The eager model `name`, its weights drawn from `seed`."""
    if name not in MODELS:
        raise SystemExit(f"unknown race model '{name}'; one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    return MODELS[name][0]()


class Whole(nn.Module):
    """The model as its users train it: forward(), then the output they name."""

    def __init__(self, model, key):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x):
        out = self.model(x)
        return out[self.key] if self.key else out


class Piece(nn.Module):
    """Part of a model's forward(), taking and handing one tensor: `run(piece, x)` over
    the model's own modules and parameters, which the piece holds (and trains) by the
    names given. `whole` is the model, for its methods, and not held."""

    def __init__(self, run, whole=None, **held):
        super().__init__()
        self.run = run
        object.__setattr__(self, "whole", whole)
        for k, m in held.items():
            setattr(self, k, m)

    def forward(self, x):
        return self.run(self, x)


def _gpt2_embed(p, tokens):
    positions = torch.arange(tokens.size(1), device=tokens.device).unsqueeze(0)
    return p.drop(p.wte(tokens) + p.wpe(positions))


def _llama_block(p, x):
    positions = torch.arange(x.size(1), device=x.device).unsqueeze(0)
    # No mask: Hugging Face's attention is causal where none is given, as torchtitan's is.
    return p.layer(x, attention_mask=None, position_ids=positions, position_embeddings=p.rotary(x, positions))


def _vit_embed(p, x):
    return p.norm_pre(p.patch_drop(p.whole._pos_embed(p.patch_embed(x))))


def _vit_head(p, x):
    return p.whole.forward_head(p.norm(x))


def _resnet_stem(p, x):
    return p.maxpool(p.relu(p.bn1(p.conv1(x))))


def pieces(name, model):
    """[(the module paths a piece runs, the piece)] in forward()'s order."""
    if name in ZOO:
        return [([n], child) for n, child in model.named_children()]
    if name == "hf-gpt2":
        t = model.transformer
        out = [(["transformer.wte", "transformer.wpe", "transformer.drop"],
                Piece(_gpt2_embed, wte=t.wte, wpe=t.wpe, drop=t.drop))]
        out += [([f"transformer.h.{i}"], block) for i, block in enumerate(t.h)]
        return out + [(["transformer.ln_f", "lm_head"], nn.Sequential(t.ln_f, model.lm_head))]
    if name == "hf-llama":
        m = model.model
        out = [(["model.embed_tokens"], m.embed_tokens)]
        out += [([f"model.layers.{i}"], Piece(_llama_block, layer=layer, rotary=m.rotary_emb))
                for i, layer in enumerate(m.layers)]
        return out + [(["model.norm", "lm_head"], nn.Sequential(m.norm, model.lm_head))]
    if name == "timm-vit":
        m = model
        out = [(["patch_embed", "cls_token", "pos_embed", "pos_drop", "patch_drop", "norm_pre"],
                Piece(_vit_embed, m, patch_embed=m.patch_embed, cls_token=m.cls_token, pos_embed=m.pos_embed,
                      pos_drop=m.pos_drop, patch_drop=m.patch_drop, norm_pre=m.norm_pre))]
        out += [([f"blocks.{i}"], block) for i, block in enumerate(m.blocks)]
        return out + [(["norm", "fc_norm", "head_drop", "head"],
                       Piece(_vit_head, m, norm=m.norm, fc_norm=m.fc_norm, head_drop=m.head_drop, head=m.head))]
    if name == "tv-resnet":
        out = [(["conv1", "bn1", "relu", "maxpool"],
                Piece(_resnet_stem, conv1=model.conv1, bn1=model.bn1, relu=model.relu, maxpool=model.maxpool))]
        for stage in ("layer1", "layer2", "layer3", "layer4"):
            out += [([f"{stage}.{i}"], block) for i, block in enumerate(getattr(model, stage))]
        return out + [(["avgpool", "fc"], nn.Sequential(model.avgpool, nn.Flatten(1), model.fc))]
    if name == "tv-vgg":
        out = [([f"features.{i}"], m) for i, m in enumerate(model.features)]
        out += [(["avgpool"], nn.Sequential(model.avgpool, nn.Flatten(1)))]
        return out + [([f"classifier.{i}"], m) for i, m in enumerate(model.classifier)]
    raise SystemExit(f"unknown race model '{name}'")


def pin_like_pipetrain():
    """Pins this rank as pipetrain's launcher pins its own (job/launcher.cpp, pinToSlot):
    where the host's ranks (LOCAL_WORLD_SIZE) outnumber the CPUs this process may run on,
    local rank r stays on CPU r mod their count, so that the race's 3 ranks on 2 cores
    share them the same way on both sides. Returns {"threads", "pinned_cpu"} for the
    record (pinned_cpu None where unpinned)."""
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cpus = sorted(os.sched_getaffinity(0))
    pinned = None
    if ranks > len(cpus):
        pinned = cpus[int(os.environ.get("LOCAL_RANK", "0")) % len(cpus)]
        os.sched_setaffinity(0, {pinned})
    return {"threads": torch.get_num_threads(), "pinned_cpu": pinned}


def loss(output, target):
    """Mean cross-entropy of a batch: class scores (N, C) or token scores (N, T, V), as
    pipetrain trains them; every racer's loss."""
    return F.cross_entropy(output.reshape(-1, output.size(-1)), target.reshape(-1))


def data(name, samples, generator):
    """Inputs and class labels of `samples` random samples shaped for model `name`."""
    kind = MODELS[name][2]
    if kind == "features":
        return torch.randn(samples, 1024, generator=generator), torch.randint(0, 10, (samples,), generator=generator)
    if kind == "tokens":
        tokens = torch.randint(0, 256, (samples, 65), generator=generator)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    shape = (1, 28, 28) if kind == "fmnist" else (3, 32, 32)
    return torch.randn(samples, *shape, generator=generator), torch.randint(0, 10, (samples,), generator=generator)


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def fashion_mnist(name, split, count):
    """The first `count` images (every one where 0) and labels of Fashion-MNIST's `split`
    ("train" or "t10k"), shaped for model `name`."""
    kind = MODELS[name][2]
    if kind not in ("fmnist", "images"):
        raise SystemExit(f"{name}: a model of {kind}, not of images, cannot train on Fashion-MNIST")

    def idx(path, header):
        try:
            with gzip.open(path) as f:
                raw = f.read()
        except OSError as e:
            raise SystemExit(f"cannot read {path} ({e}): apt-get install dataset-fashion-mnist")
        return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8)

    images = idx(f"{FASHION_MNIST}/{split}-images-idx3-ubyte.gz", 16).view(-1, 28, 28)
    labels = idx(f"{FASHION_MNIST}/{split}-labels-idx1-ubyte.gz", 8).long()
    if count:
        images, labels = images[:count], labels[:count]
    x = (images.float() / 255 - 0.2860) / 0.3530  # the training set's mean and deviation
    x = x.unsqueeze(1)  # (N, 1, 28, 28)
    if kind == "images":
        x = F.pad(x, (2, 2, 2, 2)).expand(-1, 3, -1, -1).contiguous()  # (N, 3, 32, 32)
    return x, labels


def layer_of_pieces(name, model, layer_names):
    """Index of each piece's first layer among pipetrain's layers, then the layer count."""
    sys.path.insert(0, os.path.join(REPO, "python"))
    from pipetrain_capture_common import layer_name

    paths_of = [paths for paths, _ in pieces(name, model)]

    def owner(layer):
        for k, paths in enumerate(paths_of):
            for path in paths:
                if layer == layer_name(path) or layer.startswith(layer_name(path) + "_"):
                    return k
        return None

    firsts = {}
    for i, layer in enumerate(layer_names):
        k = owner(layer)
        if k is not None:
            firsts.setdefault(k, i)
    count = len(paths_of)
    bounds = [firsts.get(k) for k in range(count)]
    if None in bounds or bounds != sorted(bounds) or bounds[0] != 0:
        raise SystemExit(f"{name}: pipetrain's layers {layer_names} do not follow the pieces in order ({bounds})")
    return bounds + [len(layer_names)]


def write(name, out_dir, samples, seed, real=None, test_samples=0):
    model = make(name, seed).train()
    if real == "fashion-mnist":
        (x, y), (tx, ty) = fashion_mnist(name, "train", samples), fashion_mnist(name, "t10k", test_samples)
    else:
        g = torch.Generator().manual_seed(seed + 1)
        x, y = data(name, samples, g)
        tx, ty = data(name, 8, g)
    # With a test split of its own, every training sample is trained on (none held out).
    torch.save({"inputs": x, "labels": y, "test_inputs": tx, "test_labels": ty}, f"{out_dir}/{name}.data.pt")
    torch.save(model.state_dict(), f"{out_dir}/{name}.eager.pt")
    path = f"{out_dir}/{name}.pt"
    if name in ZOO:
        torch.jit.script(model).save(path)
    else:
        sys.path.insert(0, os.path.join(REPO, "python"))
        from pipetrain_capture import capture
        capture(model, x[:4], path, output=MODELS[name][1])
    layers = [n for n, _ in torch.jit.load(path).named_children()]
    json.dump({"pieces": [paths[0] for paths, _ in pieces(name, model)],
               "layer_bounds": layer_of_pieces(name, model, layers)}, open(f"{out_dir}/{name}.pieces.json", "w"))


def load(name, out_dir):
    """The eager model as race_models.py wrote it to `out_dir`, in training mode."""
    model = make(name)
    model.load_state_dict(torch.load(f"{out_dir}/{name}.eager.pt"))
    return model.train()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", choices=sorted(MODELS))
    p.add_argument("out_dir")
    p.add_argument("--samples", type=int, default=4096, help="training samples")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", choices=["random", "fashion-mnist"], default="random")
    p.add_argument("--test-samples", type=int, default=0, help="with --data fashion-mnist: test images (0: all)")
    a = p.parse_args()
    write(a.name, a.out_dir, a.samples, a.seed, a.data, a.test_samples)


if __name__ == "__main__":
    main()
