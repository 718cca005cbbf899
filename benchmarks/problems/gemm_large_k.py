"""Small output, long K: (256 x 131072) @ (131072 x 256): split-K territory."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(256, 131072), torch.randn(131072, 256)]


def get_init_inputs():
    return []
