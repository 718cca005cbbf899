"""Depthwise 2-D convolution 3x3 (groups = channels = 128), padding 1."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(128, 128, 3, padding=1, groups=128)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(16, 128, 128, 128)]


def get_init_inputs():
    return []
