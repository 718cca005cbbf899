"""Instance norm (affine) then ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.InstanceNorm2d(64, affine=True)

    def forward(self, x):
        return torch.relu(self.norm(x))


def get_inputs():
    return [torch.randn(32, 64, 128, 128)]


def get_init_inputs():
    return []
