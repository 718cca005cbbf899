"""Malformed: forward() raises, adding tensors of mismatched shapes (8, 16) + (8, 15)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(8, 16), torch.randn(8, 15)]


def get_init_inputs():
    return []
