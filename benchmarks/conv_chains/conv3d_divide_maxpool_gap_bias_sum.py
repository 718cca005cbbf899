"""Conv3d -> divide -> MaxPool3d -> global average pool -> bias add -> sum over channels."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, divisor):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, k)
        self.divisor = divisor
        self.pool = nn.MaxPool3d((2, 2, 2))
        self.gap = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.bias = nn.Parameter(0.1 * torch.randn(cout, 1, 1, 1))

    def forward(self, x):
        y = self.gap(self.pool(self.conv(x) / self.divisor)) + self.bias
        return torch.sum(y, dim=1)


def get_inputs():  # KernelBench level 2 #8's sizes
    return [torch.rand(128, 8, 16, 64, 64)]


def get_init_inputs():
    return [8, 16, 3, 2.0]
