"""Two linear layers with a ReLU between them (an MLP block): two matrix products."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(1024, 4096)
        self.down = nn.Linear(4096, 1024)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def get_inputs():
    return [torch.randn(8192, 1024)]


def get_init_inputs():
    return []
