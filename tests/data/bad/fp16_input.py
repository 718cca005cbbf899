"""Malformed for the tool: get_inputs() returns a float16 tensor (op: relu)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 16, dtype=torch.float16)]


def get_init_inputs():
    return []
