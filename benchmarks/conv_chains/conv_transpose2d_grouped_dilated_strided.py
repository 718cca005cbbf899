"""ConvTranspose2d alone: 4 groups, dilation (2, 1), stride (2, 3), 3x5 kernel, no bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(32, 64, (3, 5), stride=(2, 3), padding=(1, 2),
                                     dilation=(2, 1), groups=4, bias=False)

    def forward(self, x):
        return self.up(x)


def get_inputs():  # KernelBench level 1 #75's sizes
    return [torch.rand(16, 32, 128, 256)]


def get_init_inputs():
    return []
