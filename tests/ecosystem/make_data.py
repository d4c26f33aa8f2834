#!/usr/bin/env python3
"""The data the families train on: examples/asis/make_data.py's Fashion-MNIST in three
channels and fortunes' byte tokens, plus fortunes_classes.pt: the same token windows, each
labelled with one of 4 classes (how many of its bytes are spaces, in quartiles), for an
encoder with a classification head; and fortunes_masked.pt, fortunes_classes_masked.pt: those
windows cut to random lengths (8 to 32 bytes) and padded on the right with byte 0, as
inputs by name (input_ids, attention_mask), for the models that take a padding mask; and
fortunes_seq2seq.pt, those with a target of 16 bytes that the decoder reads shifted right.
Usage: make_data.py OUT_DIR"""
import os
import subprocess
import sys

import torch

out = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
subprocess.run([sys.executable, f"{here}/../../examples/asis/make_data.py", out], check=True, stdout=subprocess.DEVNULL)
tokens = torch.load(f"{out}/fortunes.pt")
spaces = (tokens["inputs"] == ord(" ")).sum(1).float()
edges = spaces.quantile(torch.tensor([0.25, 0.5, 0.75]))
test_spaces = (tokens["test_inputs"] == ord(" ")).sum(1).float()
torch.save({"inputs": tokens["inputs"], "labels": torch.bucketize(spaces, edges),
            "test_inputs": tokens["test_inputs"], "test_labels": torch.bucketize(test_spaces, edges)},
           f"{out}/fortunes_classes.pt")


def padded(split):
    """The split's windows cut to random lengths and padded, with the mask and the labels
    (the next byte; 0 on padding) and the classes of their kept bytes."""
    ids = tokens[f"{split}inputs"]
    lengths = torch.randint(8, ids.size(1) + 1, (ids.size(0), 1), generator=torch.Generator().manual_seed(len(split)))
    mask = (torch.arange(ids.size(1)).unsqueeze(0) < lengths).long()
    kept_spaces = ((ids == ord(" ")) & (mask == 1)).sum(1).float()
    labels = tokens[f"{split}labels"] * mask
    return ids * mask, mask, labels, kept_spaces


train, test = padded(""), padded("test_")
edges = train[3].quantile(torch.tensor([0.25, 0.5, 0.75]))
for name, labels in (("fortunes_masked", lambda p: p[2]), ("fortunes_classes_masked", lambda p: torch.bucketize(p[3], edges))):
    torch.save({"input_ids": train[0], "attention_mask": train[1], "labels": labels(train),
                "test_input_ids": test[0], "test_attention_mask": test[1], "test_labels": labels(test)},
               f"{out}/{name}.pt")
# For an encoder-decoder: a target shorter than the source (the next bytes of the first
# 16), which the decoder reads shifted right, after a start token 0.
def target(p):
    labels = p[2][:, :16]
    return torch.nn.functional.pad(labels[:, :-1], (1, 0)), labels


(decoder, labels), (test_decoder, test_labels) = target(train), target(test)
torch.save({"input_ids": train[0], "attention_mask": train[1], "decoder_input_ids": decoder, "labels": labels,
            "test_input_ids": test[0], "test_attention_mask": test[1], "test_decoder_input_ids": test_decoder,
            "test_labels": test_labels}, f"{out}/fortunes_seq2seq.pt")
print(f"wrote {out}/fmnist_rgb.pt, {out}/fortunes.pt, {out}/fortunes_classes.pt and the padded fortunes")
