"""nn.MaxPool2d(3, stride 1, padding 1, dilation 2) on (16, 64, 512, 512) (1 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, stride=1, padding=1, dilation=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(16, 64, 512, 512)]


def get_init_inputs():
    return []
