"""1-D convolution, kernel 7, stride 1, 128 -> 256 channels over 4096 steps."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(128, 256, 7)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 128, 4096)]


def get_init_inputs():
    return []
