"""3-D transposed convolution 3x3x3, stride 2, padding 1, output_padding 1:
32 -> 16 channels, 16x32x32 -> 32x64x64."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(32, 16, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(4, 32, 16, 32, 32)]


def get_init_inputs():
    return []
