"""Odd: MaxPool2d((3, 2), (2, 1), (1, 0), dilation=(1, 2), ceil_mode), (13, 37, 301, 299)."""
import torch
import torch.nn as nn

batch_size = 13
channels = 37
height = 301
width = 299


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d((3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                                 ceil_mode=True)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
