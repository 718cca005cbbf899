"""nn.BatchNorm2d(64) in training mode (as constructed) on (32, 64, 512, 512) (2 GiB): batch
statistics, running statistics updated."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(64)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(32, 64, 512, 512)]


def get_init_inputs():
    return []
