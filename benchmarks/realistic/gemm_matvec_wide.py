"""Matrix-vector product (16384 x 65536) @ (65536 x 1) (4 GiB matrix): bandwidth-bound."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, v):
        return torch.matmul(a, v)


def get_inputs():
    return [torch.randn(16384, 65536), torch.randn(65536, 1)]


def get_init_inputs():
    return []
