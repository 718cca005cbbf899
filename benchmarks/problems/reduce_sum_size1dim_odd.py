"""Odd: sum over two dims, one of them of size 1: (333, 1, 77) summed over dims (1, 2)."""
import torch
import torch.nn as nn

batch_size = 333
inner = 77


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, 1, inner)]


def get_init_inputs():
    return [(1, 2)]
