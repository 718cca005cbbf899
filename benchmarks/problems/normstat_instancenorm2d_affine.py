"""InstanceNorm2d with a per-channel affine, on a (16, 64, 256, 256) tensor: per (sample,
channel) statistics over 256x256, then y * weight[c] + bias[c]."""
import torch
import torch.nn as nn

batch_size = 16
channels = 64
height = width = 256


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.norm = nn.InstanceNorm2d(num_features, affine=True)
        with torch.no_grad():  # non-trivial affine parameters, so dropping them is caught
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(num_features))
            self.norm.bias.copy_(0.1 * torch.randn(num_features))

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
