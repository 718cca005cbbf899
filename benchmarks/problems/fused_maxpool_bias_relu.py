"""Max pooling 3x3 stride 2 with padding, per-channel bias, ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(64, 1, 1))

    def forward(self, x):
        return torch.relu(F.max_pool2d(x, 3, 2, 1) + self.bias)


def get_inputs():
    return [torch.randn(32, 64, 256, 256)]


def get_init_inputs():
    return []
