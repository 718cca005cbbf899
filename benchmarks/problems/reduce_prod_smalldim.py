"""Product over a small last dim of size 8 of a (33554432, 8) tensor."""
import torch
import torch.nn as nn

batch_size = 33554432
dim = 8


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.prod(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-1]
