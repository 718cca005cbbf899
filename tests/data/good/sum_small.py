"""Tiny valid problem: sum over dim=1 of a (16, 300) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=1)


def get_inputs():
    return [torch.randn(16, 300)]


def get_init_inputs():
    return []
