"""Linear 1024 -> 3072 then GELU (a transformer MLP's first half): a held-out GEMM shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1024, 3072)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x))


def get_inputs():
    return [torch.randn(2048, 1024)]


def get_init_inputs():
    return []
