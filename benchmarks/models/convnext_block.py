"""A ConvNeXt block (ConvNeXt-T's first stage): 7x7 depthwise convolution, channels moved last,
layer norm over the channels, a GELU MLP four times as wide, layer scale, channels moved back,
the input added."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim=96):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        # layer scale: 1e-6 when training starts, of order 0.1 to 1 once trained (at 1e-6 a
        # check of the output could not see the block's branch)
        self.gamma = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.gamma * self.fc2(F.gelu(self.fc1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(32, 96, 56, 56)]


def get_init_inputs():
    return []
