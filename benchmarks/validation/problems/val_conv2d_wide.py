"""Conv2d 128 -> 256 channels, 3x3, on small planes: a held-out convolution shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(128, 256, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 128, 28, 28)]


def get_init_inputs():
    return []
