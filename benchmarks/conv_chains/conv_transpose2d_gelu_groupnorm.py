"""ConvTranspose2d -> GELU -> GroupNorm."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, groups):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, k, stride=stride)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return self.gn(F.gelu(self.up(x)))


def get_inputs():  # KernelBench level 2 #19's sizes
    return [torch.rand(128, 64, 256, 256)]


def get_init_inputs():
    return [64, 64, 3, 1, 8]
