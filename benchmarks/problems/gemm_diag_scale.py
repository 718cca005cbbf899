"""Diagonal matrix times matrix: torch.diag(a) @ B, a row scaling (no product needed)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.diag(a) @ b


def get_inputs():
    return [torch.randn(16384), torch.randn(16384, 16384)]


def get_init_inputs():
    return []
