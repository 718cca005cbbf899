"""Malformed: defines no Model class (the module is named Net instead)."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
