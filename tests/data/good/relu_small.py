"""Tiny valid problem: ReLU on a (37, 129) tensor."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(37, 129)]


def get_init_inputs():
    return []
