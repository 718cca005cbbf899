"""Conv3d -> LeakyReLU(0.2) -> per-channel add -> clamp to [-1, 1] -> GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, k)
        self.offset = nn.Parameter(torch.randn(cout, 1, 1, 1))

    def forward(self, x):
        y = F.leaky_relu(self.conv(x), negative_slope=0.2) + self.offset
        return F.gelu(torch.clamp(y, min=-1.0, max=1.0))


def get_inputs():  # KernelBench level 2 #90's sizes
    return [torch.rand(128, 8, 16, 64, 64)]


def get_init_inputs():
    return [8, 64, 3]
