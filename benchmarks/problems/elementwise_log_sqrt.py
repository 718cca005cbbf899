"""Unary math on positive inputs: log(x) + sqrt(x), x = rand + 0.01."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log(x) + torch.sqrt(x)


def get_inputs():
    return [torch.rand(batch_size, dim) + 0.01]


def get_init_inputs():
    return []
