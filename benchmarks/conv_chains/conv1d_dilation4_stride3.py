"""Conv1d alone: dilation 4, stride 3, 64 to 128 channels, no bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, dilation):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, stride=stride, dilation=dilation, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():  # KernelBench level 1 #76's sizes, batch 16 of its 64 (its 8.6 GB input)
    return [torch.rand(16, 64, 524280)]


def get_init_inputs():
    return [64, 128, 3, 3, 4]
