"""Odd: softmax over tiny rows of length 3: (1003, 3), dim=-1."""
import torch
import torch.nn as nn

batch_size = 1003
dim = 3


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-1]
