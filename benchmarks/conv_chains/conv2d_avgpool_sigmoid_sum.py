"""Conv2d -> AvgPool2d(4) -> sigmoid -> sum over channels and image."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, pool):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k)
        self.pool = nn.AvgPool2d(pool)

    def forward(self, x):
        y = torch.sigmoid(self.pool(self.conv(x)))
        return y.sum(dim=[1, 2, 3])


def get_inputs():  # KernelBench level 2 #65's sizes
    return [torch.rand(128, 8, 384, 384)]


def get_init_inputs():
    return [8, 64, 3, 4]
