"""Conv2d -> BatchNorm2d (training) -> scale."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, scale):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.bn = nn.BatchNorm2d(cout)
        self.scale = scale

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scale


def get_inputs():  # KernelBench level 2 #73's sizes
    return [torch.rand(128, 8, 128, 128)]


def get_init_inputs():
    return [8, 64, 3, 2.0]
