"""Pointwise (1x1) convolution, 256 -> 512 channels: a GEMM per image."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(256, 512, 1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(16, 256, 64, 64)]


def get_init_inputs():
    return []
