"""2-D transposed convolution, odd sizes: 3x3, stride 2, padding 1, output_padding 1,
dilation 2, groups 2, 48 -> 36 channels, 63x47 -> 128x96."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(48, 36, 3, stride=2, padding=1, output_padding=1,
                                       groups=2, dilation=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 48, 63, 47)]


def get_init_inputs():
    return []
