"""ConvTranspose3d -> MaxPool3d(2) -> MaxPool3d(3) -> sum over channels."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k, stride=stride, padding=pad)
        self.pool_a = nn.MaxPool3d(2)
        self.pool_b = nn.MaxPool3d(3)

    def forward(self, x):
        y = self.pool_b(self.pool_a(self.up(x)))
        return y.sum(dim=1, keepdim=True)


def get_inputs():  # KernelBench level 2 #78's sizes
    return [torch.rand(16, 32, 32, 32, 32)]


def get_init_inputs():
    return [32, 64, 5, 2, 2]
