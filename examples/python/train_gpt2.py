#!/usr/bin/env python3
"""Trains Hugging Face's GPT-2 (a small config, nothing downloaded) on the fortunes as
byte tokens on 2 pipetrain ranks, then samples from the trained model in its own class.

    .venv/bin/python examples/python/train_gpt2.py [--nproc 2] [--epochs 4]
"""
import argparse
import os
import sys

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import pipetrain  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--nproc", type=int, default=2)
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--fortunes", default="/usr/share/games/fortunes/fortunes", help="Debian's fortunes package")
a = p.parse_args()

text = open(a.fortunes, "rb").read()
tokens = torch.tensor(list(text), dtype=torch.long).unfold(0, 65, 8)  # windows of 65 bytes, 8 apart
split = len(tokens) * 9 // 10
data = {"input_ids": tokens[:split, :-1], "labels": tokens[:split, 1:],
        "test_input_ids": tokens[split:, :-1], "test_labels": tokens[split:, 1:]}

torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=256, n_positions=64, bos_token_id=0,
                                 eos_token_id=0)
model = transformers.GPT2LMHeadModel(config)
run = pipetrain.train(model, data, nproc=a.nproc, batch=32, epochs=a.epochs, output="logits",
                      optimizer="adamw", lr=1e-3)
print(run)
print(f"test loss {run.summary.test_loss:.3f}, accuracy {run.summary.test_accuracy:.3f}; report: {run.report}")

model.eval()
prompt = torch.tensor([list(b"The ")])
out = model.generate(prompt, max_new_tokens=40, do_sample=False, pad_token_id=0)
print(bytes(out[0].tolist()).decode("latin-1"))
