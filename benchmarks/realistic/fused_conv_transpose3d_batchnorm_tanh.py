"""ConvTranspose3d(32, 16, 3, stride 2, padding 1, output_padding 1), BatchNorm3d(16) in
training mode, tanh on (64, 32, 32, 64, 64) (1 GiB): KernelBench level 2's
transposed-3-D-convolution-then-batch-norm pattern."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(32, 16, 3, stride=2, padding=1, output_padding=1)
        self.bn = nn.BatchNorm3d(16)

    def forward(self, x):
        return torch.tanh(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(64, 32, 32, 64, 64)]


def get_init_inputs():
    return []
