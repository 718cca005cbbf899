"""Activation chain: hardtanh(mish(x) + hardswish(x) * sigmoid(x), -1, 1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = F.mish(x) + F.hardswish(x) * torch.sigmoid(x)
        return F.hardtanh(y, min_val=-1.0, max_val=1.0)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
