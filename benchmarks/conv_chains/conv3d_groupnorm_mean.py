"""Conv3d -> GroupNorm -> mean over everything but the batch."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, groups):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, k)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        return self.gn(self.conv(x)).mean(dim=[1, 2, 3, 4])


def get_inputs():  # KernelBench level 2 #23's sizes
    return [torch.rand(128, 3, 24, 32, 32)]


def get_init_inputs():
    return [3, 24, 3, 8]
