"""Depthwise nn.Conv2d(128, 128, 3, padding 1, groups 128) on (32, 128, 256, 256) (1 GiB)."""
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
    return [torch.randn(32, 128, 256, 256)]


def get_init_inputs():
    return []
