"""Rectangular matrix product: (2048 x 8192) @ (8192 x 4096), strict fp32."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(2048, 8192), torch.randn(8192, 4096)]


def get_init_inputs():
    return []
