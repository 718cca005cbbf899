"""nn.ConvTranspose3d(64, 32, 3, stride 2, padding 1, output_padding 1, groups 4) on (32, 64,
32, 64, 64) (1 GiB): out (32, 32, 64, 128, 128) (4 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(64, 32, 3, stride=2, padding=1, output_padding=1, groups=4)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 64, 32, 64, 64)]


def get_init_inputs():
    return []
