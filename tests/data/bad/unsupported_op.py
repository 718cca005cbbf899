"""Unsupported: uses torch.roll, an op the tool does not support."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.roll(x, 1, dims=1)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
