"""Square product (16384 x 16384) @ (16384 x 16384) in fp32 (2 GiB in, 8.8 TFLOP)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


N = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
