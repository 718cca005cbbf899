"""Scan: inclusive cumsum along the last dim, 4096 rows of 65536 fp32 (1 GB in, 1 GB out)."""
import torch
import torch.nn as nn

batch_size = 4096
length = 65536


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, length)]


def get_init_inputs():
    return [1]
