"""Odd: argmax over the middle dim of a (37, 333, 77) tensor, dim=1 (int64 output)."""
import torch
import torch.nn as nn

batch_size = 37
reduce_size = 333
inner = 77


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, reduce_size, inner)]


def get_init_inputs():
    return [1]
