"""Scan: cumsum along a middle dim, (64, 4096, 1024) fp32 scanned over dim 1 (1 GB): each step
of the scan is 1024 contiguous elements."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(64, 4096, 1024)]


def get_init_inputs():
    return [1]
