"""Running sum squashed: tanh(cumsum(x, -1) * 0.01)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.tanh(torch.cumsum(x, dim=-1) * 0.01)


def get_inputs():
    return [torch.randn(4096, 32768)]


def get_init_inputs():
    return []
