"""Asymmetric kernel (5 x 3) with asymmetric padding (2, 1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, (5, 3), padding=(2, 1))

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(16, 32, 128, 256)]


def get_init_inputs():
    return []
