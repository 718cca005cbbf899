"""nn.Conv3d(32, 32, 3, padding 2, dilation 2, groups 4) on (8, 32, 64, 128, 128) volumes (1
GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(32, 32, 3, padding=2, dilation=2, groups=4)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 32, 64, 128, 128)]


def get_init_inputs():
    return []
