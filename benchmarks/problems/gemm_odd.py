"""Odd-sized matrix product: (1001 x 1003) @ (1003 x 997), no size a multiple of 4."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(1001, 1003), torch.randn(1003, 997)]


def get_init_inputs():
    return []
