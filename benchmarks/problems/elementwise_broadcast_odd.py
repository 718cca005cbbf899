"""Odd-shaped broadcast chain: tanh(softplus(leaky_relu(elu(x * scale + bias)))), scale (333, 1), bias (1003,)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 7
rows = 333
dim = 1003


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, scale, bias):
        y = F.elu(x * scale + bias)
        y = F.leaky_relu(y, negative_slope=0.1)
        return torch.tanh(F.softplus(y))


def get_inputs():
    return [torch.randn(batch_size, rows, dim), torch.randn(rows, 1), torch.randn(dim)]


def get_init_inputs():
    return []
