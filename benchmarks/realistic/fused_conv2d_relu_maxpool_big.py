"""Conv2d(16, 32, 3, padding 1), ReLU, MaxPool2d(2) on (64, 16, 512, 512) (1 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(64, 16, 512, 512)]


def get_init_inputs():
    return []
