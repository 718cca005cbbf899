"""Softmax over dim 1 of (4096, 393216) (6 GiB): KernelBench level 1's published size."""
import torch
import torch.nn as nn
import torch.nn.functional as F


batch_size = 4096
dim = 393216


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
