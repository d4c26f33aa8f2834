"""A U-Net-style classifier (from the public architecture, not copied) that calls one
nn.MaxPool2d and one nn.Upsample at several places and reuses one activation module, with
the encoder's maps joined to the decoder's by concatenation (long skips)."""
import torch
from torch import nn


def conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout))


class UNetClassifier(nn.Module):
    def __init__(self, channels=3, classes=10, width=8):
        super().__init__()
        self.act = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.enc1 = conv(channels, width)
        self.enc2 = conv(width, 2 * width)
        self.mid = conv(2 * width, 2 * width)
        self.dec2 = conv(4 * width, width)
        self.dec1 = conv(2 * width, width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        e1 = self.act(self.enc1(x))
        e2 = self.act(self.enc2(self.pool(e1)))
        m = self.act(self.mid(self.pool(e2)))
        d2 = self.act(self.dec2(torch.cat([self.up(m), e2], dim=1)))
        d1 = self.act(self.dec1(torch.cat([self.up(d2), e1], dim=1)))
        return self.head(d1.mean(dim=(2, 3)))
