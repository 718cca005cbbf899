"""Vector-matrix product: (1 x 32768) @ (32768 x 8192), reducing over the matrix's rows."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, a):
        return torch.matmul(x, a)


def get_inputs():
    return [torch.randn(1, 32768), torch.randn(32768, 8192)]


def get_init_inputs():
    return []
