"""Malformed: forward() returns a Python float, not a tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return 1.5


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
