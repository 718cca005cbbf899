"""Odd: exclusive cumsum as cumsum(x) - x along rows of 1003, 333 rows (neither a multiple of
4 nor of 32)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=1) - x


def get_inputs():
    return [torch.randn(333, 1003)]


def get_init_inputs():
    return []
