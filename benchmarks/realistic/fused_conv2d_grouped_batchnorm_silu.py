"""Grouped Conv2d(64, 128, 3, stride 2, padding 1, groups 4), BatchNorm2d(128) in training
mode, SiLU on (32, 64, 512, 512) (2 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 128, 3, stride=2, padding=1, groups=4)
        self.bn = nn.BatchNorm2d(128)

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(32, 64, 512, 512)]


def get_init_inputs():
    return []
