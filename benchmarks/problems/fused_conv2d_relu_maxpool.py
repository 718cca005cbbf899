"""Conv2d, ReLU, then 2x2 max pooling: a convolution and a pooling window, two kernels."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 128, 3, padding=1)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 2)


def get_inputs():
    return [torch.randn(32, 64, 64, 64)]


def get_init_inputs():
    return []
