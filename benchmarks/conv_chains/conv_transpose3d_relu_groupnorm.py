"""ConvTranspose3d (no bias) -> ReLU -> GroupNorm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, groups):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k, bias=False)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return self.gn(torch.relu(self.up(x)))


def get_inputs():  # KernelBench level 2 #61's sizes
    return [torch.rand(16, 64, 32, 32, 32)]


def get_init_inputs():
    return [64, 128, 3, 8]
