"""Max pooling 2D: MaxPool2d(kernel_size=3, stride=2, padding=1) over (32, 64, 256, 256)."""
import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 256
width = 256


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [3, 2, 1]
