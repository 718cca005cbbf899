"""Gemm, bias, ReLU, then LayerNorm(2048): nn.Linear(4096, 2048) on (65536, 4096) (1 GiB in); a
norm over the product's output."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 2048)
        self.ln = nn.LayerNorm(2048)

    def forward(self, x):
        return self.ln(torch.relu(self.fc(x)))


def get_inputs():
    return [torch.randn(65536, 4096)]


def get_init_inputs():
    return []
