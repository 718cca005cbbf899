"""Transposed convolution (4x4, stride 2, padding 1, no bias of its own), plus a bias
parameter, ReLU: relu(conv_transpose2d(x) + bias)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1, bias=False)
        self.bias = nn.Parameter(torch.randn(32, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(16, 64, 64, 64)]


def get_init_inputs():
    return []
