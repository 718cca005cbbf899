"""A masked cumsum with a bool mask input: cumsum(x * mask) along the rows (issue 50: refused on
the GPU, `unsupported dtype bool for input 1`)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, mask):
        return torch.cumsum(x * mask, dim=1)


def get_inputs():
    return [torch.randn(64, 4096), torch.rand(64, 4096) > 0.5]


def get_init_inputs():
    return []
