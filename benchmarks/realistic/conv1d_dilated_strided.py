"""nn.Conv1d(32, 64, 3, stride 2, dilation 4) on (64, 32, 131072) signals (1 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(32, 64, 3, stride=2, dilation=4)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(64, 32, 131072)]


def get_init_inputs():
    return []
