"""Scalar affine then ReLU then scalar ops: relu(x * 0.5 - 0.25) * 2.0 + 1.0."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 16384


class Model(nn.Module):
    def __init__(self, scale, shift):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x):
        return torch.relu(x * self.scale - self.shift) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.5, 0.25]
