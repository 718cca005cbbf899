"""nn.Conv2d(32, 32, 3, padding 2, dilation 2) on (32, 32, 512, 512) (1 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 32, 3, padding=2, dilation=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 32, 512, 512)]


def get_init_inputs():
    return []
