"""Tall-skinny product: (16384 x 16) @ (16 x 16384); K = 16, a 1 GB output written once."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(16384, 16), torch.randn(16, 16384)]


def get_init_inputs():
    return []
