"""GroupNorm(8 groups, 128 channels) with affine, on a (32, 128, 128, 128) tensor: statistics
over each group's 16 channels x 128 x 128, then a per-channel weight and bias."""
import torch
import torch.nn as nn

batch_size = 32
channels = 128
groups = 8
height = width = 128


class Model(nn.Module):
    def __init__(self, num_groups, num_channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, num_channels)
        with torch.no_grad():  # non-trivial affine parameters, so dropping them is caught
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(num_channels))
            self.norm.bias.copy_(0.1 * torch.randn(num_channels))

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [groups, channels]
