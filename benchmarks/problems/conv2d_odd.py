"""Odd-sized 2-D convolution: 3 -> 13 channels, 5x5 kernel, stride 2, on 37 x 41."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 13, 5, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(3, 3, 37, 41)]


def get_init_inputs():
    return []
