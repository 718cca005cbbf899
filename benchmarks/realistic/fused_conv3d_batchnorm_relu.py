"""Conv3d(16, 32, 3, padding 1), BatchNorm3d(32) in training mode, ReLU on (32, 16, 32, 128,
128) volumes (1 GiB): a 3-D U-Net block."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(16, 32, 3, padding=1)
        self.bn = nn.BatchNorm3d(32)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(32, 16, 32, 128, 128)]


def get_init_inputs():
    return []
