"""nn.Conv1d(32, 32, 3, padding 1) on (128, 32, 1048576) signals: a 16 GiB input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(32, 32, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(128, 32, 1048576)]


def get_init_inputs():
    return []
