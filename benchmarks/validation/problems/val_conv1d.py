"""Conv1d 128 -> 128 channels, kernel 5 (a sequence model's convolution): a held-out shape."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(128, 128, 5, padding=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(32, 128, 2048)]


def get_init_inputs():
    return []
