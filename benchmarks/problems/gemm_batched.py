"""Batched matrix product: 128 x (512 x 256) @ (256 x 512), torch.bmm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(128, 512, 256), torch.randn(128, 256, 512)]


def get_init_inputs():
    return []
