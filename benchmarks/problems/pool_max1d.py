"""Max pooling 1D: MaxPool1d(kernel_size=4, stride=2, padding=1) over (32, 128, 32768)."""
import torch
import torch.nn as nn

batch_size = 32
channels = 128
length = 32768


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [4, 2, 1]
