#!/usr/bin/env python3
"""GPT-2's recipe end to end: pipetrain on 2 ranks against a single-process PyTorch
script of the same recipe, loss for loss.

The recipe is GPT-2's and Llama's: AdamW at betas (0.9, 0.95), weight decay 0.1 on every
parameter of two or more dimensions (none on biases and norms: `--no-decay 1d`), a linear
warm-up then cosine decay to a tenth of the rate, gradients clipped at global norm 1.0.
The data is a token stream this script writes from the fortunes text (byte tokens,
uint16, as nanoGPT's prepare.py writes train.bin and val.bin); the model is the zoo's
GPT (race_models.py's `gpt`: 4 pre-LN blocks, width 128, context 64, vocabulary 256),
pipetrain training its scripted layers and PyTorch the eager model with the same
weights.

The PyTorch script draws the windows pipetrain draws: position p of epoch e's order is
window keyed_position(p) (data.h, SampleOrder's keyed order, written out below), so
step k's mini-batch is windows keyed_position(k B .. k B + B - 1). It trains on their
mean loss, as pipetrain does (each micro-batch's mean, over M micro-batches of equal
size). Both runs are fp32 on the CPU; the curves part by rounding only (the two sum the
same products in other orders), which Adam's division by its second moment amplifies
slowly over the steps. Prints the largest relative difference of the loss, and the first
step where it passes 1e-4, and writes the curves as JSON.

    gpt2_recipe.py [--steps 200] [--out bench/results/gpt2-recipe-DATE.json] [--check 1e-5]
"""
import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, f"{REPO}/bench/race")
import race_models  # noqa: E402

MASK = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finaliser (src/torch/data/readers.h)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def keyed_position(position, size, key):
    """SampleOrder's keyed order (data.h, keyedPosition): a 4-round Feistel network over
    the smallest even number of bits holding size - 1, walked back into [0, size)."""
    if size <= 1:
        return position
    bits = 2
    while bits < 62 and (1 << bits) < size:
        bits += 2
    half = bits // 2
    mask = (1 << half) - 1
    x = position
    while True:
        left, right = x >> half, x & mask
        for r in range(4):
            left, right = right, left ^ (mix64(key ^ (r << 32) ^ right) & mask)
        x = (left << half) | right
        if x < size:
            return x


def epoch_key(seed, epoch):
    return mix64((mix64(seed) + epoch) & MASK)


def write_tokens(out_dir, fortunes="/usr/share/games/fortunes"):
    """The fortunes text as byte tokens in train.bin (nine tenths) and val.bin (the rest)."""
    files = sorted(p for p in glob.glob(f"{fortunes}/*")
                   if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(".dat"))
    text = b"".join(open(p, "rb").read() for p in files)
    tokens = np.frombuffer(text, dtype=np.uint8).astype(np.uint16)
    cut = len(tokens) * 9 // 10
    tokens[:cut].tofile(f"{out_dir}/train.bin")
    tokens[cut:].tofile(f"{out_dir}/val.bin")
    return len(tokens)


def pytorch_curve(model_dir, train_bin, a):
    """The single-process script: the same recipe, the same windows, every step's loss."""
    model = race_models.load("gpt", model_dir)
    tokens = torch.from_numpy(np.fromfile(train_bin, dtype=np.uint16).astype(np.int64))
    context = 64
    windows = (len(tokens) - 1) // context
    decay = [p for p in model.parameters() if p.dim() >= 2]
    exempt = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": exempt, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95))
    s = torch.optim.lr_scheduler
    schedule = s.SequentialLR(opt, [s.LinearLR(opt, 1 / a.warmup, 1.0, total_iters=a.warmup - 1),
                                    s.CosineAnnealingLR(opt, T_max=a.steps - a.warmup, eta_min=a.lr / 10)],
                              milestones=[a.warmup])
    batch = a.microbatches * a.microbatch_size
    key = epoch_key(a.seed, 0)
    losses, norms = [], []
    for k in range(a.steps):
        rows = [keyed_position(p, windows, key) for p in range(k * batch, (k + 1) * batch)]
        x = torch.stack([tokens[i * context:i * context + context] for i in rows])
        y = torch.stack([tokens[i * context + 1:i * context + context + 1] for i in rows])
        opt.zero_grad()
        loss = race_models.loss(model(x), y)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item())
        opt.step()
        schedule.step()
        losses.append(loss.item())
    return losses, norms


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--microbatch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pipetrain", default=f"{REPO}/build/pipetrain")
    p.add_argument("--check", type=float, help="exit 1 where a loss differs by more than this, relatively (the tests)")
    p.add_argument("--out", default=f"{REPO}/bench/results/gpt2-recipe-{datetime.date.today():%Y%m%d}.json")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        total = write_tokens(tmp)
        race_models.write("gpt", tmp, 16, 0)  # the model, scripted and eager, with the same weights
        command = [a.pipetrain, "train", "--model-file", f"{tmp}/gpt.pt", "--data-file", f"{tmp}/train.bin",
                   "--context", "64", "--nproc", "2", "--schedule", "1f1b", "--stage-bounds", "0,3,6",
                   "--microbatches", str(a.microbatches), "--microbatch-size", str(a.microbatch_size),
                   "--max-steps", str(a.steps), "--no-eval", "--seed", str(a.seed), "--timeout", "300",
                   "--optimizer", "adamw", "--betas", "0.9,0.95", "--weight-decay", "0.1", "--no-decay", "1d",
                   "--lr", str(a.lr), "--lr-warmup", str(a.warmup), "--lr-schedule", "cosine",
                   "--lr-min", str(a.lr / 10), "--clip-grad-norm", "1.0", "--log-jsonl", f"{tmp}/metrics.jsonl"]
        started = time.time()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ,
                       PIPETRAIN_CACHE_DIR=f"{tmp}/cache"))
        pipetrain_seconds = time.time() - started
        steps = [json.loads(line) for line in open(f"{tmp}/metrics.jsonl")]
        ours = [e["loss"] for e in steps if e["event"] == "step"]
        our_norms = [e["grad_norm"] for e in steps if e["event"] == "step"]
        started = time.time()
        theirs, their_norms = pytorch_curve(tmp, f"{tmp}/train.bin", a)
        pytorch_seconds = time.time() - started
    assert len(ours) == len(theirs) == a.steps, f"{len(ours)} and {len(theirs)} losses for {a.steps} steps"
    rel = [abs(o - t) / abs(t) for o, t in zip(ours, theirs)]
    rel_norm = [abs(o - t) / t for o, t in zip(our_norms, their_norms)]
    first = next((k for k, r in enumerate(rel) if r > 1e-4), None)
    result = {"steps": a.steps, "tokens": total, "recipe": " ".join(command[command.index("--optimizer"):-2]),
              "pipetrain_loss": ours, "pytorch_loss": theirs, "pipetrain_grad_norm": our_norms,
              "pytorch_grad_norm": their_norms, "max_relative_loss_difference": max(rel),
              "max_relative_norm_difference": max(rel_norm), "first_step_beyond_1e-4": first,
              "pipetrain_seconds": pipetrain_seconds, "pytorch_seconds": pytorch_seconds}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    json.dump(result, open(a.out, "w"), indent=1)
    print(f"{a.steps} steps of GPT-2's recipe on {total} byte tokens: loss {theirs[0]:.4f} -> {theirs[-1]:.4f} "
          f"(PyTorch), {ours[0]:.4f} -> {ours[-1]:.4f} (pipetrain, 2 ranks)")
    print(f"largest relative difference: loss {max(rel):.2e}, gradient norm {max(rel_norm):.2e}; "
          f"first step beyond 1e-4: {first}")
    print(f"wrote {a.out}")
    if a.check is not None and max(rel) > a.check:
        sys.exit(f"a loss differs by {max(rel):.2e} relatively, more than {a.check:g}")


if __name__ == "__main__":
    main()
