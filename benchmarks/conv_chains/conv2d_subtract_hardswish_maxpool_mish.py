"""Conv2d -> subtract a constant -> hardswish -> MaxPool2d -> mish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k, shift, pool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.shift = shift
        self.pool = nn.MaxPool2d(pool)

    def forward(self, x):
        y = F.hardswish(self.conv(x) - self.shift)
        return F.mish(self.pool(y))


def get_inputs():  # KernelBench level 2 #35's sizes
    return [torch.rand(128, 64, 128, 128)]


def get_init_inputs():
    return [64, 128, 3, 0.5, 2]
