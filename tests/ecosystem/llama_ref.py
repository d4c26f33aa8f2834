"""A Llama written the way Meta's reference code writes it (from the public architecture,
not copied): RMSNorm, rotary embeddings applied through complex numbers
(`reshape(*shape[:-1], -1, 2)` and `view_as_complex`), grouped-query attention with
repeated key/value heads, a SwiGLU feed-forward, blocks in a ModuleDict, and the rotary
table and causal mask made once in the model's forward() and passed to every block."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Args:
    dim: int = 64
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 256
    multiple_of: int = 32
    norm_eps: float = 1e-5
    max_seq_len: int = 64
    rope_theta: float = 10000.0


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotary_table(head_dim, length, theta):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = torch.outer(torch.arange(length).float(), inv)
    return torch.polar(torch.ones_like(angles), angles)  # complex64, (length, head_dim / 2)


def rotate(xq, xk, table):
    cq = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    ck = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    table = table.view(1, cq.shape[1], 1, cq.shape[-1])
    out_q = torch.view_as_real(cq * table).flatten(3)
    out_k = torch.view_as_real(ck * table).flatten(3)
    return out_q.type_as(xq), out_k.type_as(xk)


def repeat_heads(x, times):
    if times == 1:
        return x
    b, t, heads, d = x.shape
    return x[:, :, :, None, :].expand(b, t, heads, times, d).reshape(b, t, heads * times, d)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, table, mask):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, t, self.n_kv_heads, self.head_dim)
        q, k = rotate(q, k, table)
        k = repeat_heads(k, self.n_heads // self.n_kv_heads)
        v = repeat_heads(v, self.n_heads // self.n_kv_heads)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        scores = q @ k.transpose(2, 3) / self.head_dim ** 0.5 + mask
        out = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.wo(out.transpose(1, 2).contiguous().view(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden, multiple_of):
        super().__init__()
        hidden = int(2 * hidden / 3)
        hidden = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, 4 * args.dim, args.multiple_of)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x, table, mask):
        h = x + self.attention(self.attention_norm(x), table, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: Args = Args()):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(args) for i in range(args.n_layers)})
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        # A plain attribute, as the reference keeps it: not a parameter, not a buffer.
        self.freqs_cis = rotary_table(args.dim // args.n_heads, args.max_seq_len * 2, args.rope_theta)

    def forward(self, tokens):
        _, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        table = self.freqs_cis[:seqlen]
        mask = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device).triu(1)
        for layer in self.layers.values():
            h = layer(h, table, mask)
        return self.output(self.norm(h)).float()
