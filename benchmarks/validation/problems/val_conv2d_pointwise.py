"""Conv2d 1x1, 192 -> 384 channels (a pointwise projection): a held-out convolution shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(192, 384, 1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 192, 28, 28)]


def get_init_inputs():
    return []
