"""nn.Linear(8192, 4096), swish, divide by 2, clamp to [-1, 1], tanh (KernelBench level 2
style) on (32768, 8192) (1 GiB in)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8192, 4096)

    def forward(self, x):
        x = self.fc(x)
        x = x * torch.sigmoid(x)
        x = x / 2.0
        x = torch.clamp(x, -1.0, 1.0)
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(32768, 8192)]


def get_init_inputs():
    return []
