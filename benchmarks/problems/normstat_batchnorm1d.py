"""Batch norm 1d with batch statistics (training-mode semantics) on a (64, 512, 2048) tensor:
per-channel statistics over (N, L), then a per-channel weight and bias.

Written as F.batch_norm(..., training=True) with no running buffers, so that the harness's
model.eval() (called before tracing and before the reference runs) does not switch it to
running statistics, as it would an nn.BatchNorm1d module.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
channels = 512
length = 2048


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_features))
        self.bias = nn.Parameter(0.1 * torch.randn(num_features))

    def forward(self, x):
        return F.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels]
