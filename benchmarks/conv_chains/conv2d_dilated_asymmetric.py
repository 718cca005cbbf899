"""Conv2d alone: 5x9 kernel, dilation (2, 3), padding (2, 4), no bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, (5, 9), padding=(2, 4), dilation=(2, 3), bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():  # KernelBench level 1 #80's sizes
    return [torch.rand(8, 32, 512, 512)]


def get_init_inputs():
    return []
