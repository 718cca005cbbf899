"""Grouped 2-D convolution: 8 groups, 128 -> 256 channels, 3x3."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(128, 256, 3, padding=1, groups=8)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(16, 128, 64, 64)]


def get_init_inputs():
    return []
