"""L1 normalization of rows: x / sum(|x|, dim=1), shape (16384, 16384)."""
import torch
import torch.nn as nn

batch_size = 16384
dim = 16384


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
