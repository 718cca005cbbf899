"""Batched matmul, 48 products of 384 x 192 by 192 x 320: a held-out GEMM shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(48, 384, 192), torch.randn(48, 192, 320)]


def get_init_inputs():
    return []
