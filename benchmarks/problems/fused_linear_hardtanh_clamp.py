"""Linear layer, hardtanh, then a clamp: the usual bounded-activation chain."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 2048)

    def forward(self, x):
        return torch.clamp(F.hardtanh(self.fc(x), -2.0, 2.0), min=-1.0)


def get_inputs():
    return [torch.randn(8192, 4096)]


def get_init_inputs():
    return []
