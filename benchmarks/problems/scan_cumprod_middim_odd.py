"""Odd: cumprod along a middle dim of (5, 37, 7) (odd sizes, a scan of strided columns)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.cumprod(x, dim=1)


def get_inputs():
    return [torch.randn(5, 37, 7)]


def get_init_inputs():
    return []
