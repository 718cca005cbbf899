"""Depthwise Conv2d(128, 128, 3, padding 1, groups 128, no bias), BatchNorm2d(128) in training
mode, ReLU6 on (32, 128, 256, 256) (1 GiB): a MobileNet block."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(128, 128, 3, padding=1, groups=128, bias=False)
        self.bn = nn.BatchNorm2d(128)

    def forward(self, x):
        return F.relu6(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(32, 128, 256, 256)]


def get_init_inputs():
    return []
