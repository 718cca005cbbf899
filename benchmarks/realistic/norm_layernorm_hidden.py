"""nn.LayerNorm(1024) over (128, 4096, 1024) activations (2 GiB), elementwise affine."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(1024)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(128, 4096, 1024)]


def get_init_inputs():
    return []
