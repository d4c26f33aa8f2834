#!/usr/bin/env python3
"""Held-out round 4: twelve models the tool's authors did not write, each trained once the
way a new user would, with one command:

    pipetrain train --model-py 'bench/heldout/round4.py:NAME()' --data-file DATA.pt \
        --nproc 2 --batch 32 --epochs 1 --max-steps 3 [--model-output logits]

This file is both the driver and the module `--model-py` loads: each model is a function
below, built from a config (nothing downloaded). Data: byte tokens of the fortunes
package's texts and Fashion-MNIST (Debian packages), written to a temporary folder.

Usage (from the repository root):
    PIPETRAIN_CACHE_DIR=$(mktemp -d) .venv/bin/python bench/heldout/round4.py --out OUT.json
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "asis"))
from make_data import fashion_mnist  # noqa: E402  (Fashion-MNIST as 3 x 28 x 28, normalised)

SEED = 0
VOCAB = 256
CONTEXT = 32
FORTUNES = "/usr/share/games/fortunes"
CLASS_FILES = ["people", "definitions", "cookie", "computers"]  # sequence classes: which file a fortune is from
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THIS = os.path.relpath(os.path.abspath(__file__), ROOT)


def _quiet_transformers():
    import transformers
    transformers.logging.set_verbosity_error()
    return transformers


# ---------------------------------------------------------------- the models

def qwen2_moe():
    """1. Hugging Face Qwen2-MoE: a mixture of experts with a shared expert."""
    t = _quiet_transformers()
    return t.Qwen2MoeForCausalLM(t.Qwen2MoeConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=96, moe_intermediate_size=32,
        shared_expert_intermediate_size=64, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, decoder_sparse_step=1,
        bos_token_id=0, eos_token_id=0))


def t5():
    """2. Hugging Face T5 encoder-decoder (input_ids, attention_mask, decoder_input_ids)."""
    t = _quiet_transformers()
    return t.T5ForConditionalGeneration(t.T5Config(
        vocab_size=VOCAB, d_model=48, d_kv=12, d_ff=96, num_layers=2, num_decoder_layers=2, num_heads=4,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def distilbert():
    """3. Hugging Face DistilBERT sequence classifier, padded inputs with a mask."""
    t = _quiet_transformers()
    return t.DistilBertForSequenceClassification(t.DistilBertConfig(
        vocab_size=VOCAB, dim=48, hidden_dim=96, n_layers=2, n_heads=4, max_position_embeddings=64,
        num_labels=len(CLASS_FILES), pad_token_id=0))


def gpt_neox():
    """4. Hugging Face GPT-NeoX (parallel attention and MLP, partial rotary)."""
    t = _quiet_transformers()
    return t.GPTNeoXForCausalLM(t.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, rotary_pct=0.25, bos_token_id=0, eos_token_id=0))


def roberta():
    """5. Hugging Face RoBERTa sequence classifier with an attention mask."""
    t = _quiet_transformers()
    return t.RobertaForSequenceClassification(t.RobertaConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=CONTEXT + 2 + 2, num_labels=len(CLASS_FILES), pad_token_id=1,
        bos_token_id=0, eos_token_id=2, type_vocab_size=1))


def convnext_atto():
    """6. timm ConvNeXt-Atto (the smallest ConvNeXt) with stochastic depth."""
    import timm
    return timm.create_model("convnext_atto", num_classes=10, drop_path_rate=0.1)


def swin():
    """7. timm Swin (windowed attention, shifted windows, patch merging) at 32 x 32."""
    import timm
    return timm.create_model("swin_tiny_patch4_window7_224", img_size=32, patch_size=4, window_size=4,
                             embed_dim=32, depths=(2, 2, 2, 2), num_heads=(1, 2, 4, 8),
                             num_classes=10, drop_path_rate=0.1)


def mobilenetv3():
    """8. timm MobileNetV3-Small (squeeze-excitation, hard-swish)."""
    import timm
    return timm.create_model("mobilenetv3_small_100", num_classes=10)


class AuxNet(nn.Module):
    """9. A CNN with an auxiliary classifier, returning {"logits": ..., "aux": ...}."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True))
        self.block1 = nn.Sequential(nn.Conv2d(32, 48, 3, stride=2, padding=1), nn.BatchNorm2d(48), nn.ReLU())
        self.aux_head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(48, classes))
        self.block2 = nn.Sequential(nn.Conv2d(48, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.block1(self.stem(x))
        aux = self.aux_head(x)
        x = self.block2(x)
        logits = self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))
        return {"logits": logits, "aux": aux}


def aux_net():
    return AuxNet()


class LSTMClassifier(nn.Module):
    """10. Embedding, a 2-layer bidirectional time-first LSTM, a head on the last step."""

    def __init__(self, classes=len(CLASS_FILES)):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 48)
        self.lstm = nn.LSTM(48, 48, num_layers=2, dropout=0.1, bidirectional=True, batch_first=False)
        self.head = nn.Linear(2 * 48, classes)

    def forward(self, ids):                      # ids: (N, T)
        x = self.emb(ids).transpose(0, 1)        # (T, N, E)
        out, _ = self.lstm(x)                    # (T, N, 2H)
        return self.head(out[-1])                # (N, C)


def lstm_classifier():
    return LSTMClassifier()


class GRULM(nn.Module):
    """11. A GRU language model predicting the next byte."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 48)
        self.gru = nn.GRU(48, 64, num_layers=2, batch_first=True)
        self.out = nn.Linear(64, VOCAB)

    def forward(self, ids):
        h, _ = self.gru(self.emb(ids))
        return self.out(h)


def gru_lm():
    return GRULM()


class TiedCausalEncoder(nn.Module):
    """12. nn.TransformerEncoder (pre-norm, batch-first) with a causal mask and a head tied
    to the token embedding."""

    def __init__(self, d=48, layers=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Embedding(CONTEXT, d)
        layer = nn.TransformerEncoderLayer(d, 4, 96, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, ids):
        T = ids.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=ids.device)
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device))
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


def tied_transformer():
    return TiedCausalEncoder()


# name, expression, data, extra flags
MODELS = [
    ("hf-qwen2-moe", "qwen2_moe()", "lm", []),
    ("hf-t5", "t5()", "seq2seq", []),
    ("hf-distilbert", "distilbert()", "cls_masked", []),
    ("hf-gpt-neox", "gpt_neox()", "lm", []),
    ("hf-roberta", "roberta()", "cls_masked_roberta", []),
    ("timm-convnext-atto", "convnext_atto()", "images", []),
    ("timm-swin", "swin()", "images", []),
    ("timm-mobilenetv3-small", "mobilenetv3()", "images", []),
    ("aux-head-dict", "aux_net()", "images", ["--model-output", "logits"]),
    ("lstm-bi-classifier", "lstm_classifier()", "cls", []),
    ("gru-lm", "gru_lm()", "lm", []),
    ("tied-causal-encoder", "tied_transformer()", "lm", []),
]


# ---------------------------------------------------------------- the data

def fashion_mnist_32(split, count):
    """Fashion-MNIST as 3 x 32 x 32 (examples/asis/make_data.py's, padded by 2)."""
    x, labels = fashion_mnist(split, count)
    return nn.functional.pad(x, (2, 2, 2, 2), value=float(x.min())).contiguous(), labels


def _fortune_files():
    return [p for p in sorted(glob.glob(f"{FORTUNES}/*"))
            if not p.endswith((".dat", ".u8")) and not os.path.islink(p) and os.path.isfile(p)]


def fortune_tokens():
    text = b"".join(open(p, "rb").read() for p in _fortune_files())
    return torch.tensor(np.frombuffer(text, dtype=np.uint8), dtype=torch.long)


def fortune_sentences():
    """(bytes, class) of each fortune of CLASS_FILES, shuffled with the seed."""
    items = []
    for c, name in enumerate(CLASS_FILES):
        for s in open(f"{FORTUNES}/{name}", "rb").read().split(b"\n%\n"):
            s = s.strip()
            if s:
                items.append((s, c))
    g = torch.Generator().manual_seed(SEED)
    return [items[i] for i in torch.randperm(len(items), generator=g).tolist()]


def padded(items, pad, offset=0, bos=None, eos=None):
    """Right-padded ids (N, CONTEXT) and their mask; bytes shifted by `offset` (RoBERTa
    keeps ids 0-3 for its special tokens), truncated to fit."""
    n = len(items)
    ids = torch.full((n, CONTEXT), pad, dtype=torch.long)
    mask = torch.zeros(n, CONTEXT, dtype=torch.long)
    labels = torch.tensor([c for _, c in items], dtype=torch.long)
    for i, (s, _) in enumerate(items):
        body = [min(b + offset, VOCAB - 1) for b in s]
        room = CONTEXT - (bos is not None) - (eos is not None)
        seq = ([bos] if bos is not None else []) + body[:room] + ([eos] if eos is not None else [])
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
    return ids, mask, labels


def make_data(folder, train=1024, test=128):
    paths = {}
    tokens = fortune_tokens()

    # next-byte language modelling: (N, T) ids, (N, T) next ids
    w = tokens[: (train + test) * CONTEXT + 1]
    x, y = w[:-1].reshape(-1, CONTEXT), w[1:].reshape(-1, CONTEXT)
    paths["lm"] = f"{folder}/lm.pt"
    torch.save({"inputs": x[:train], "labels": y[:train], "test_inputs": x[train:], "test_labels": y[train:]},
               paths["lm"])

    # sequence to sequence: 32 bytes in, the next 16 out (teacher forcing)
    span = CONTEXT + 16
    w = tokens[: (train + test) * span].reshape(-1, span)
    src, tgt = w[:, :CONTEXT], w[:, CONTEXT:]
    dec = torch.cat([torch.zeros(len(tgt), 1, dtype=torch.long), tgt[:, :-1]], 1)  # decoder_start_token_id 0
    mask = torch.ones_like(src)
    d = {"input_ids": src, "attention_mask": mask, "decoder_input_ids": dec, "labels": tgt}
    paths["seq2seq"] = f"{folder}/seq2seq.pt"
    torch.save({**{k: v[:train] for k, v in d.items()}, **{f"test_{k}": v[train:] for k, v in d.items()}},
               paths["seq2seq"])

    # sequence classification: which file a fortune comes from
    items = fortune_sentences()[: train + test]
    ids, mask, labels = padded(items, pad=0)
    paths["cls"] = f"{folder}/cls.pt"
    torch.save({"inputs": ids[:train], "labels": labels[:train], "test_inputs": ids[train:],
                "test_labels": labels[train:]}, paths["cls"])

    def named(path, ids, mask, labels):
        torch.save({"input_ids": ids[:train], "attention_mask": mask[:train], "labels": labels[:train],
                    "test_input_ids": ids[train:], "test_attention_mask": mask[train:],
                    "test_labels": labels[train:]}, path)

    paths["cls_masked"] = f"{folder}/cls_masked.pt"
    named(paths["cls_masked"], ids, mask, labels)
    ids_r, mask_r, _ = padded(items, pad=1, offset=4, bos=0, eos=2)  # RoBERTa: <s>=0, <pad>=1, </s>=2
    paths["cls_masked_roberta"] = f"{folder}/cls_masked_roberta.pt"
    named(paths["cls_masked_roberta"], ids_r, mask_r, labels)

    x, y = fashion_mnist_32("train", train)
    xt, yt = fashion_mnist_32("test", test)
    paths["images"] = f"{folder}/images.pt"
    torch.save({"inputs": x, "labels": y, "test_inputs": xt, "test_labels": yt}, paths["images"])
    return paths


# ---------------------------------------------------------------- the round

def first_error_line(text):
    """The line that says why: pipetrain's own "error:" line, or where it points above
    (a capture that failed), the Python exception it names."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    exception = re.compile(r"^[A-Za-z_.]*(Error|Exception)\b.*:")
    for i, l in enumerate(lines):
        if re.search(r"\berror:", l):
            if "above" in l:
                before = [b for b in lines[:i] if exception.search(b)]
                if before:
                    return before[-1]
            return l
    tail = [l for l in lines if exception.search(l) or "timed out" in l]
    return tail[-1] if tail else (lines[-1] if lines else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", help="model names to run (default: all)")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()

    torch.manual_seed(SEED)
    binary = os.path.join(ROOT, "build", "pipetrain")
    folder = tempfile.mkdtemp(prefix="heldout-round4-")
    paths = make_data(folder)
    print(f"data in {folder}", flush=True)

    results = []
    for name, expr, data, extra in MODELS:
        if args.only and name not in args.only:
            continue
        cmd = [binary, "train", "--model-py", f"{THIS}:{expr}", "--data-file", paths[data], "--nproc", "2",
               "--batch", "32", "--epochs", "1", "--max-steps", "3", "--seed", str(SEED)] + extra
        shown = " ".join(f"'{c}'" if ":" in c and "(" in c else c for c in cmd)
        start = time.time()
        try:
            p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
            out, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            out += f"\ntimed out after {args.timeout} s"
            rc = None
        seconds = round(time.time() - start, 1)
        ok = rc == 0
        m = None
        for line in out.splitlines():
            if "trained" in line and " with" in line:
                m = re.search(r"([0-9.]+)\s*samples/s", line) or m
        sps = float(m.group(1)) if m else None
        err = "" if ok else first_error_line(out)
        with open(os.path.join(folder, f"{name}.log"), "w") as f:
            f.write(out)
        results.append({"model": name, "command": shown, "ok": ok, "seconds": seconds,
                        "first_error_line": err, "samples_per_s": sps})
        print(f"{name:24s} {'ok' if ok else 'FAILED':6s} {seconds:6.1f} s  "
              f"{'' if sps is None else f'{sps} samples/s'}{err}", flush=True)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"{sum(r['ok'] for r in results)}/{len(results)} ok; logs in {folder}; wrote {args.out}")


if __name__ == "__main__":
    main()
