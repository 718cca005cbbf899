"""Matrix product with the second operand transposed: A @ B.T (the layout of nn.Linear)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b.T)


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(2048, 4096)]


def get_init_inputs():
    return []
