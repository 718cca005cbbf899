"""Max over dim 0 (column max) of a (16384, 16384) tensor: torch.max(x, dim=0)[0]."""
import torch
import torch.nn as nn

rows = 16384
cols = 16384


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.max(x, dim=self.dim)[0]


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [0]
