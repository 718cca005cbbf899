"""ConvTranspose3d -> scale -> BatchNorm3d (training) -> global average pool."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, scale):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k)
        self.scale = scale
        self.bn = nn.BatchNorm3d(cout)
        self.gap = nn.AdaptiveAvgPool3d((1, 1, 1))

    def forward(self, x):
        return self.gap(self.bn(self.up(x) * self.scale))


def get_inputs():  # KernelBench level 2 #77's sizes
    return [torch.rand(16, 64, 16, 32, 32)]


def get_init_inputs():
    return [64, 128, 5, 2.0]
