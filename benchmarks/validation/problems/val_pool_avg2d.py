"""Average pooling, 2x2 windows, stride 2, on 96x96 planes: a held-out pooling shape."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.avg_pool2d(x, 2)


def get_inputs():
    return [torch.randn(48, 128, 96, 96)]


def get_init_inputs():
    return []
