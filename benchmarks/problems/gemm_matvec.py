"""Matrix-vector product: (8192 x 32768) @ (32768 x 1), 1 GB of matrix read once."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, x):
        return torch.matmul(a, x)


def get_inputs():
    return [torch.randn(8192, 32768), torch.randn(32768, 1)]


def get_init_inputs():
    return []
