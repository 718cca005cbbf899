"""Matrix product plus a residual of the output's shape, then ReLU: relu(A @ B + C)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b, c):
        return torch.relu(torch.matmul(a, b) + c)


def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096), torch.randn(4096, 4096)]


def get_init_inputs():
    return []
