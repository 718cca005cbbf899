"""InstanceNorm2d (no affine) of a (32, 128, 128, 128) tensor: each (sample, channel) plane of
128x128 is normalised by its own mean and biased variance (eps 1e-5)."""
import torch
import torch.nn as nn

batch_size = 32
channels = 128
height = width = 128


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.norm = nn.InstanceNorm2d(num_features)  # affine=False, no running statistics

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
