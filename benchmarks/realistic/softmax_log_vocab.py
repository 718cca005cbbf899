"""Log-softmax over a 32000-wide vocabulary, (16384, 32000) (2 GiB)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(16384, 32000)]


def get_init_inputs():
    return []
