"""Linear layer then ReLU: relu(x @ W.T + b), 8192 x 4096 -> 4096."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4096)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(8192, 4096)]


def get_init_inputs():
    return []
