"""RMS norm, then a SiLU gate from a second input: silu(g) * rms_norm(x)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(4096)

    def forward(self, x, g):
        return F.silu(g) * self.norm(x)


def get_inputs():
    return [torch.randn(8192, 4096), torch.randn(8192, 4096)]


def get_init_inputs():
    return []
