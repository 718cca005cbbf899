"""Odd: min over the last dim of a (37, 1, 1003) tensor with a size-1 middle dim."""
import torch
import torch.nn as nn

batch_size = 37
dim = 1003


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.min(x, dim=self.dim)[0]


def get_inputs():
    return [torch.randn(batch_size, 1, dim)]


def get_init_inputs():
    return [-1]
