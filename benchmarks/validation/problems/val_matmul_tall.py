"""A tall product, 16384 x 512 by 512 x 768: a held-out GEMM shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(16384, 512), torch.randn(512, 768)]


def get_init_inputs():
    return []
