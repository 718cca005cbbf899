"""Tall product (262144 x 1024) @ (1024 x 1024) (1 GiB + 4 MiB in, 1 GiB out)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(262144, 1024), torch.randn(1024, 1024)]


def get_init_inputs():
    return []
