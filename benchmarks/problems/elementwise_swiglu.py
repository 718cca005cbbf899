"""SwiGLU gate: silu(a) * b on two same-shaped tensors (binary elementwise)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return F.silu(a) * b


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
