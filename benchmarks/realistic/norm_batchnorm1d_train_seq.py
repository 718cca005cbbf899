"""nn.BatchNorm1d(256) in training mode on (64, 256, 16384) (1 GiB): statistics over (N, L)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(256)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(64, 256, 16384)]


def get_init_inputs():
    return []
