"""Odd: AvgPool3d((3, 3, 2), (2, 2, 1), 1, ceil_mode, divisor_override=5), (3, 7, 33, 45, 77)."""
import torch
import torch.nn as nn

batch_size = 3
channels = 7
depth = 33
height = 45
width = 77


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool3d((3, 3, 2), stride=(2, 2, 1), padding=1, ceil_mode=True,
                                 divisor_override=5)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, depth, height, width)]


def get_init_inputs():
    return []
