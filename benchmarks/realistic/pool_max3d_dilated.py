"""nn.MaxPool3d(3, stride 2, padding 1, dilation 2) on (16, 32, 64, 128, 128) volumes (2 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool3d(3, stride=2, padding=1, dilation=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(16, 32, 64, 128, 128)]


def get_init_inputs():
    return []
