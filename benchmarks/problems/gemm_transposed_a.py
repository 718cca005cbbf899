"""Matrix product with the first operand transposed: A.T @ B, A of 4096 x 2048."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a.T, b)


def get_inputs():
    return [torch.randn(4096, 2048), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
