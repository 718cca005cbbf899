"""ConvTranspose3d -> clamp from below -> divide by a constant."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad, floor, divisor):
        super().__init__()
        self.up = nn.ConvTranspose3d(cin, cout, k, stride=stride, padding=pad)
        self.floor, self.divisor = floor, divisor

    def forward(self, x):
        return torch.clamp(self.up(x), min=self.floor) / self.divisor


def get_inputs():  # KernelBench level 2 #100's sizes
    return [torch.rand(16, 64, 24, 48, 48)]


def get_init_inputs():
    return [64, 128, 3, 2, 1, -1.0, 2.0]
