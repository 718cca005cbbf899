"""Odd-sized linear layer (1001 -> 777) with leaky ReLU and a bias already in the layer."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(1001, 777)

    def forward(self, x):
        return F.leaky_relu(self.fc(x), 0.1)


def get_inputs():
    return [torch.randn(999, 1001)]


def get_init_inputs():
    return []
