"""nn.ConvTranspose3d(32, 16, 3, stride 2, padding 1, output_padding 1) on (16, 32, 32, 128,
128) (1 GiB): out (16, 16, 64, 256, 256) (4 GiB)."""
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
    return [torch.randn(16, 32, 32, 128, 128)]


def get_init_inputs():
    return []
