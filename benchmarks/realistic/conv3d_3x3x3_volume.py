"""nn.Conv3d(16, 32, 3, padding 1) on (8, 16, 64, 256, 256) volumes (2 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(16, 32, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 16, 64, 256, 256)]


def get_init_inputs():
    return []
