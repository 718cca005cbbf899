"""Conv2d (64 -> 64 channels, 3x3), ReLU, 2x2 max pooling on 56x56 planes: a second held-out
shape of the conv+pool family."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 2)


def get_inputs():
    return [torch.randn(32, 64, 56, 56)]


def get_init_inputs():
    return []
