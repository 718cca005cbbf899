"""ConvTranspose3d -> BatchNorm3d (training) -> AvgPool3d -> AvgPool3d."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k, stride=stride, padding=pad)
        self.bn = nn.BatchNorm3d(cout)
        self.pool_a = nn.AvgPool3d(2)
        self.pool_b = nn.AvgPool3d(2)

    def forward(self, x):
        return self.pool_b(self.pool_a(self.bn(self.up(x))))


def get_inputs():  # KernelBench level 2 #72's sizes
    return [torch.rand(64, 3, 32, 32, 32)]


def get_init_inputs():
    return [3, 16, 3, 2, 1]
