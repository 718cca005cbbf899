"""1-D transposed convolution, kernel 5, stride 2, padding 2, output_padding 1:
128 -> 64 channels, length 1024 -> 2048."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose1d(128, 64, 5, stride=2, padding=2, output_padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 128, 1024)]


def get_init_inputs():
    return []
