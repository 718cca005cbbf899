"""Matrix product with both operands transposed: A.T @ B.T."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a.T, b.T)


def get_inputs():
    return [torch.randn(4096, 2048), torch.randn(3072, 4096)]


def get_init_inputs():
    return []
