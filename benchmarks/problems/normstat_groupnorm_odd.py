"""Odd: F.group_norm with 5 groups of 6 channels on a (3, 30, 11, 13) tensor (groups of
6 x 143 = 858 elements, not a multiple of 4 or 32), with a per-channel weight and bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 3
channels = 30
groups = 5
height, width = 11, 13


class Model(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.num_groups = num_groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_channels))
        self.bias = nn.Parameter(0.1 * torch.randn(num_channels))

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [groups, channels]
