"""Malformed: get_inputs() raises RuntimeError."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    raise RuntimeError("get_inputs is broken on purpose")


def get_init_inputs():
    return []
