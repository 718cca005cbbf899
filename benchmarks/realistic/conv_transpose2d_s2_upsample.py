"""nn.ConvTranspose2d(64, 32, 4, stride 2, padding 1) on (64, 64, 256, 256) (1 GiB): out (64,
32, 512, 512)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(64, 64, 256, 256)]


def get_init_inputs():
    return []
