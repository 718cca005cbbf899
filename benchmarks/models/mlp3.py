"""A 3-layer MLP: linear, ReLU, linear, ReLU, linear."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features=512, hidden=1024, classes=256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(256, 512)]


def get_init_inputs():
    return []
