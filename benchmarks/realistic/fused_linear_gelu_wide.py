"""nn.Linear(4096, 4096) then GELU on a (65536, 4096) batch (1 GiB in)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4096)

    def forward(self, x):
        return F.gelu(self.fc(x))


def get_inputs():
    return [torch.randn(65536, 4096)]


def get_init_inputs():
    return []
