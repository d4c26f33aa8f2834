"""The zoo's gpt written in PyTorch: the same layers, sizes and arithmetic as pipetrain's
`zoo gpt`, with its own random weights. Shared by the GPU peers in bench/device
(pipelining_peer.py, torch_loop.py).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Embed(nn.Module):
    def __init__(self, vocab, context, width):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)

    def forward(self, x):
        return self.tokens(x) + self.positions(torch.arange(x.size(1), device=x.device))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.fc_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        n, t, c = x.shape
        q, k, v = (y.view(n, t, self.heads, c // self.heads).transpose(1, 2)
                   for y in self.qkv(self.ln1(x)).split(c, 2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(n, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, width, vocab):
        super().__init__()
        self.ln, self.out = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, x):
        return self.out(self.ln(x))


def layers(a):
    return [Embed(a.vocab, a.context, a.width)] + [Block(a.width, a.heads) for _ in range(a.layers)] + \
        [Head(a.width, a.vocab)]


def loss_fn(output, target):
    return F.cross_entropy(output.float().flatten(0, 1), target.flatten())
