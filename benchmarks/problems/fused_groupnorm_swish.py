"""Group norm then Swish: silu(group_norm(x)), 32 groups over 128 channels."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(32, 128)

    def forward(self, x):
        return F.silu(self.gn(x))


def get_inputs():
    return [torch.randn(16, 128, 128, 128)]


def get_init_inputs():
    return []
