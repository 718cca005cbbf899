"""Tiny valid problem: softmax over the last dim of a (33, 257) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(33, 257)]


def get_init_inputs():
    return []
