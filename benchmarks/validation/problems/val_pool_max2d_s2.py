"""Max pooling, 3x3 windows, stride 2, padding 1 (a ResNet stem's pool): a held-out pooling
shape."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 3, stride=2, padding=1)


def get_inputs():
    return [torch.randn(32, 64, 112, 112)]


def get_init_inputs():
    return []
