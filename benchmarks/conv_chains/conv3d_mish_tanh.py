"""Conv3d -> mish -> tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, k)

    def forward(self, x):
        return torch.tanh(F.mish(self.conv(x)))


def get_inputs():  # KernelBench level 2 #47's sizes
    return [torch.rand(16, 32, 32, 64, 64)]


def get_init_inputs():
    return [32, 64, 3]
