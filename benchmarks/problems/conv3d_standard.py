"""3-D convolution 3x3x3, padding 1, 32 -> 64 channels on 8 x 32 x 32 x 64 x 64."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(32, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 32, 32, 64, 64)]


def get_init_inputs():
    return []
