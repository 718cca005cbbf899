"""ConvTranspose2d -> per-channel bias add -> gated by the sigmoid of its max over channels."""
# It replaces ConvTranspose2d -> bias -> max over channels -> sigmoid alone, whose output was
# near-constant at these sizes (the max of 128 channels: spread 0.015 around 0.6), so that under
# TF32 a constant passed torch's own error and every candidate was refused as degenerate on the
# H100 (benchmarks/results/2026-12-07-h100-conv-chains-3).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, k, stride=stride)
        self.bias = nn.Parameter(0.1 * torch.randn(cout, 1, 1))

    def forward(self, x):
        y = self.up(x) + self.bias
        return y * torch.sigmoid(torch.amax(y, dim=1, keepdim=True))


def get_inputs():  # KernelBench level 2 #93's sizes
    return [torch.rand(128, 64, 64, 64)]


def get_init_inputs():
    return [64, 128, 4, 2]
