"""ConvTranspose3d alone: 48 to 48 channels, 3x3x3 kernel, no bias, on 64^3 volumes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, k):
        super().__init__()
        self.up = nn.ConvTranspose3d(channels, channels, k, bias=False)

    def forward(self, x):
        return self.up(x)


def get_inputs():  # KernelBench level 1 #61's sizes
    return [torch.rand(8, 48, 64, 64, 64)]


def get_init_inputs():
    return [48, 3]
