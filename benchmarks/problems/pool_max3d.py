"""Max pooling 3D: MaxPool3d(kernel_size=3, stride=2, padding=1) over (4, 32, 64, 128, 128)."""
import torch
import torch.nn as nn

batch_size = 4
channels = 32
depth = 64
height = 128
width = 128


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool3d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return [3, 2, 1]
