"""Linear layer on a (batch, sequence, features) tensor, then ReLU: 32 x 512 x 2048 -> 2048."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2048, 2048)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(32, 512, 2048)]


def get_init_inputs():
    return []
