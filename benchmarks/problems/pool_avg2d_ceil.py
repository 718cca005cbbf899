"""Avg pooling 2D, ceil_mode: AvgPool2d(3, 2, 1, ceil_mode=True), (32, 64, 256, 256)."""
# The last window starts on the last input row and runs past the padded edge: torch divides
# by the window clipped at input + padding (2 rows), not by the kernel (3) or the input (1).
import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 256
width = 256


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size, stride=stride, padding=padding, ceil_mode=True)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [3, 2, 1]
