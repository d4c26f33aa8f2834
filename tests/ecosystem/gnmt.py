"""A GNMT-style encoder-decoder (Wu et al. 2016; PipeDream's GNMT-8 and -16, scaled down),
written as reference code writes recurrent models: time-first LSTMs (no batch_first), a
bidirectional first encoder layer, a two-layer LSTM with dropout between its layers,
residual connections from the third layer on, dropout between layers, attention of the
decoder's first layer over the encoder's states whose context every later decoder layer
reads beside its input, and a classifier over the vocabulary.

It trains on byte tokens as a language model does: the source is the window itself and
the decoder, fed the window, predicts each next byte. The encoder sees the whole window,
so the task can be solved by copying; the family tests how such a model is cut and
trained, not translation."""
import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """Bahdanau's normalized attention as GNMT uses it: scores v . tanh(W q + U k)."""

    def __init__(self, hidden: int):
        super().__init__()
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden)
        self.v = nn.Parameter(torch.randn(hidden) / hidden ** 0.5)

    def forward(self, query, keys):  # (T, N, H), (S, N, H) -> context (T, N, H)
        q = self.query(query).transpose(0, 1).unsqueeze(2)        # (N, T, 1, H)
        k = self.key(keys).transpose(0, 1).unsqueeze(1)           # (N, 1, S, H)
        scores = (torch.tanh(q + k) * self.v).sum(-1)             # (N, T, S)
        weights = F.softmax(scores, dim=-1)
        return torch.bmm(weights, keys.transpose(0, 1)).transpose(0, 1)


class GNMT(nn.Module):
    def __init__(self, vocab: int = 256, hidden: int = 32, layers: int = 4, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.source_embedding = nn.Embedding(vocab, hidden)
        self.encoder_bidirectional = nn.LSTM(hidden, hidden // 2, bidirectional=True)
        self.encoder_pair = nn.LSTM(hidden, hidden, num_layers=2, dropout=dropout)
        self.encoder = nn.ModuleList(nn.LSTM(hidden, hidden) for _ in range(layers - 3))
        self.target_embedding = nn.Embedding(vocab, hidden)
        self.decoder_first = nn.LSTM(hidden, hidden)
        self.attention = Attention(hidden)
        self.decoder = nn.ModuleList(nn.LSTM(2 * hidden, hidden) for _ in range(layers - 1))
        self.classifier = nn.Linear(hidden, vocab)

    def forward(self, tokens):                                    # (N, T)
        source = tokens.t()                                       # (T, N): time first
        x, _ = self.encoder_bidirectional(self.dropout(self.source_embedding(source)))
        x, _ = self.encoder_pair(self.dropout(x))
        for lstm in self.encoder:
            y, _ = lstm(self.dropout(x))
            x = x + y
        memory = x
        y, _ = self.decoder_first(self.dropout(self.target_embedding(source)))
        context = self.attention(y, memory)
        for i, lstm in enumerate(self.decoder):
            out, _ = lstm(self.dropout(torch.cat([y, context], -1)))
            y = out if i == 0 else y + out
        return self.classifier(self.dropout(y)).transpose(0, 1)  # (N, T, vocab)
