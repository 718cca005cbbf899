"""Standardization written with mean and var: (x - mean) / sqrt(var + eps) * w + b."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8192))
        self.b = nn.Parameter(torch.randn(8192))

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5) * self.w + self.b


def get_inputs():
    return [torch.randn(16384, 8192)]


def get_init_inputs():
    return []
