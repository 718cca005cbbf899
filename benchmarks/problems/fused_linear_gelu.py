"""Linear layer then exact GELU, 4096 x 4096 -> 8192."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 8192)

    def forward(self, x):
        return F.gelu(self.fc(x))


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
