"""ConvTranspose3d -> BatchNorm3d (training) -> subtract the spatial mean."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k, stride=stride, padding=pad)
        self.bn = nn.BatchNorm3d(cout)

    def forward(self, x):
        y = self.bn(self.up(x))
        return y - y.mean(dim=(2, 3, 4), keepdim=True)


def get_inputs():  # KernelBench level 2 #15's sizes
    return [torch.rand(16, 16, 16, 32, 32)]


def get_init_inputs():
    return [16, 32, 3, 2, 1]
