"""Grouped Conv2d (4 groups, padded) -> GroupNorm over the same 4 groups -> ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, groups):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return torch.relu(self.gn(self.conv(x)))


def get_inputs():  # KernelBench level 2's usual image batch (128 x 64 x 128 x 128)
    return [torch.rand(128, 64, 128, 128)]


def get_init_inputs():
    return [64, 128, 3, 4]
