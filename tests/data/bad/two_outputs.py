"""Malformed: forward() returns a tuple of two tensors."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x), torch.sigmoid(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
