"""A residual MLP as a new user writes it: adds in forward() around two Sequentials, a
long skip from the first hidden state to the last, and residual blocks after a
functional F.gelu."""
import torch.nn.functional as F
from torch import nn


class ResBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + self.fc(self.norm(x))


class ResidualMLP(nn.Module):
    def __init__(self, inputs=784, width=128, classes=10):
        super().__init__()
        self.inp = nn.Linear(inputs, width)
        self.b1 = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.b2 = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.blocks = nn.ModuleList([ResBlock(width) for _ in range(2)])
        self.out = nn.Linear(width, classes)

    def forward(self, x):
        h0 = self.inp(x.flatten(1))
        h1 = h0 + self.b1(h0)
        h2 = h1 + self.b2(h1)
        h = F.gelu(h2 + h0)
        for block in self.blocks:
            h = block(h)
        return self.out(h)
