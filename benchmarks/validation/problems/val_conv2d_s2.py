"""Conv2d 96 -> 192 channels, 3x3, stride 2 (a downsampling stage): a held-out convolution
shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(96, 192, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 96, 56, 56)]


def get_init_inputs():
    return []
