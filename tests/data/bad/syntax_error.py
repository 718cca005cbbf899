"""Malformed: a syntax error (missing colon after the def)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x)
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
