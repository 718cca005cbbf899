"""2-D convolution 3x3, stride 2, padding 1, 128 -> 256 channels."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(128, 256, 3, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(16, 128, 128, 128)]


def get_init_inputs():
    return []
