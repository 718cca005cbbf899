"""Depthwise Conv2d (3x3, padded) -> pointwise Conv2d (1x1, 64 to 128 channels)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, k, padding=k // 2, groups=cin, bias=False)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


def get_inputs():  # KernelBench level 1 #86's sizes
    return [torch.rand(16, 64, 512, 512)]


def get_init_inputs():
    return [64, 128, 3]
