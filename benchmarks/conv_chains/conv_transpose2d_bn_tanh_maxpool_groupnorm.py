"""ConvTranspose2d -> BatchNorm2d (training) -> tanh -> MaxPool2d -> GroupNorm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad, groups):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, k, stride=stride, padding=pad)
        self.bn = nn.BatchNorm2d(cout)
        self.pool = nn.MaxPool2d(2, 2)
        self.gn = nn.GroupNorm(groups, cout)

    def forward(self, x):
        y = torch.tanh(self.bn(self.up(x)))
        return self.gn(self.pool(y))


def get_inputs():  # KernelBench level 2 #11's sizes
    return [torch.rand(512, 64, 32, 32)]


def get_init_inputs():
    return [64, 128, 5, 1, 1, 8]
