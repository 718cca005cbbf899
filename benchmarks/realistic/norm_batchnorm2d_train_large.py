"""nn.BatchNorm2d(32) in training mode on (128, 32, 1024, 1024): a 16 GiB activation map."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(32)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(128, 32, 1024, 1024)]


def get_init_inputs():
    return []
