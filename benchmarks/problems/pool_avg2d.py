"""Average pooling 2D: AvgPool2d(kernel_size=2) over (16, 32, 512, 512)."""
import torch
import torch.nn as nn

batch_size = 16
channels = 32
height = 512
width = 512


class Model(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [2]
