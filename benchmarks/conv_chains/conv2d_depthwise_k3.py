"""Depthwise Conv2d alone: 64 channels, 3x3 kernel, no padding, no bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, k):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, k, groups=channels, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():  # KernelBench level 1 #82's sizes
    return [torch.rand(16, 64, 512, 512)]


def get_init_inputs():
    return [64, 3]
