"""Batched product scaled and shifted: (Q @ K^T) * (1/sqrt(d)) + bias, attention scores with a
per-key additive bias (128 x 512 x 512, d = 128)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, q, k, bias):
        return torch.bmm(q, k.transpose(1, 2)) * (128 ** -0.5) + bias


def get_inputs():
    return [torch.randn(128, 512, 128), torch.randn(128, 512, 128), torch.randn(512)]


def get_init_inputs():
    return []
