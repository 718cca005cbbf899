"""Batched product, ReLU, scaled: relu(bmm(a, b)) * 0.5."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.relu(torch.bmm(a, b)) * 0.5


def get_inputs():
    return [torch.randn(64, 512, 512), torch.randn(64, 512, 512)]


def get_init_inputs():
    return []
