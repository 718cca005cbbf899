"""Argmin over the middle dim of a (128, 512, 4096) tensor, dim=1 (int64 output)."""
import torch
import torch.nn as nn

batch_size = 128
reduce_size = 512
inner = 4096


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.argmin(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, reduce_size, inner)]


def get_init_inputs():
    return [1]
