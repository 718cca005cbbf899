"""Max pooling 2D, dilated, padded: MaxPool2d(3, 1, padding=1, dilation=3), (32, 64, 256, 256)."""
import torch
import torch.nn as nn

batch_size = 32
channels = 64
height = 256
width = 256


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding, dilation):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size, stride=stride, padding=padding,
                                 dilation=dilation)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [3, 1, 1, 3]
