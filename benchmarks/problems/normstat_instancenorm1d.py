"""F.instance_norm of a (128, 256, 2048) tensor (InstanceNorm1d semantics): each (sample,
channel) row of 2048 is normalised by its own statistics, then a per-channel affine."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 128
channels = 256
length = 2048


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(num_features))
        self.bias = nn.Parameter(0.1 * torch.randn(num_features))

    def forward(self, x):
        return F.instance_norm(x, weight=self.weight, bias=self.bias, eps=1e-5)


def get_inputs():
    return [torch.randn(batch_size, channels, length)]


def get_init_inputs():
    return [channels]
