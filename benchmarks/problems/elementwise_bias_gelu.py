"""Bias add followed by GELU: gelu(x + bias), bias of shape (D,) broadcast over rows."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16384
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, bias):
        return F.gelu(x + bias)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(dim)]


def get_init_inputs():
    return []
