"""Batched product: 128 x (1024 x 2048) @ (2048 x 1024) (2 GiB in)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(128, 1024, 2048), torch.randn(128, 2048, 1024)]


def get_init_inputs():
    return []
