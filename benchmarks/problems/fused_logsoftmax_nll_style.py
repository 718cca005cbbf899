"""Log-softmax then a scaled shift, as before a loss: log_softmax(x) * -1 + 0.1."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.log_softmax(x, dim=-1) * -1.0 + 0.1


def get_inputs():
    return [torch.randn(16384, 8192)]


def get_init_inputs():
    return []
