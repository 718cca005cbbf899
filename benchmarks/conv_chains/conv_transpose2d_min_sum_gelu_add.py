"""ConvTranspose2d -> min over channels -> sum over rows -> GELU -> bias add."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad, out_pad):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, k, stride=stride, padding=pad,
                                     output_padding=out_pad)
        self.bias = nn.Parameter(0.1 * torch.randn(1, 1, 1))

    def forward(self, x):
        y = self.up(x)
        y = torch.min(y, dim=1, keepdim=True).values
        y = y.sum(dim=2, keepdim=True)
        # at these sizes the sum is below -50 everywhere, GELU gives 0 and the output is the
        # bias, as in KernelBench's own file: its output alone checks the chain weakly
        return F.gelu(y) + self.bias


def get_inputs():  # KernelBench level 2 #36's sizes
    return [torch.rand(16, 64, 128, 128)]


def get_init_inputs():
    return [64, 128, 3, 2, 1, 1]
