"""Layer norm then GELU over 4096 features: gelu(layer_norm(x))."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(4096)

    def forward(self, x):
        return F.gelu(self.ln(x))


def get_inputs():
    return [torch.randn(16384, 4096)]


def get_init_inputs():
    return []
