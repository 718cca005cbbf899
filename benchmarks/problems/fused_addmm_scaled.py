"""torch.addmm with beta and alpha: 0.5 * C + 2 * (A @ B), C a bias row broadcast."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, c, a, b):
        return torch.addmm(c, a, b, beta=0.5, alpha=2.0)


def get_inputs():
    return [torch.randn(4096), torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
