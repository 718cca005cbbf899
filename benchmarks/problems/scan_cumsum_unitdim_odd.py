"""Odd: reverse cumsum along the last dim of a (77, 1, 4099) tensor (a dimension of 1, an odd
row length), written with flips."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.flip(torch.cumsum(torch.flip(x, [2]), dim=2), [2])


def get_inputs():
    return [torch.randn(77, 1, 4099)]


def get_init_inputs():
    return []
