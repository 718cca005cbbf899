"""Conv2d -> GroupNorm -> per-channel scale -> MaxPool2d(4) -> clamp to [0, 1]."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, groups, pool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.gn = nn.GroupNorm(groups, cout)
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(cout, 1, 1))
        self.pool = nn.MaxPool2d(pool)

    def forward(self, x):
        y = self.pool(self.gn(self.conv(x)) * self.scale)
        return torch.clamp(y, 0.0, 1.0)


def get_inputs():  # KernelBench level 2 #85's sizes
    return [torch.rand(128, 8, 128, 128)]


def get_init_inputs():
    return [8, 64, 3, 16, 4]
