"""Conv2d -> per-channel multiply -> LeakyReLU -> GELU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.gain = nn.Parameter(torch.randn(cout, 1, 1))
        self.act = nn.LeakyReLU()

    def forward(self, x):
        return F.gelu(self.act(self.conv(x) * self.gain))


def get_inputs():  # KernelBench level 2 #54's sizes
    return [torch.rand(64, 64, 256, 256)]


def get_init_inputs():
    return [64, 64, 3]
