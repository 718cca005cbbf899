"""Odd-sized product then tanh and a bias: tanh(a @ b) + bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(999))

    def forward(self, a, b):
        return torch.tanh(a @ b) + self.bias


def get_inputs():
    return [torch.randn(1025, 777), torch.randn(777, 999)]


def get_init_inputs():
    return []
