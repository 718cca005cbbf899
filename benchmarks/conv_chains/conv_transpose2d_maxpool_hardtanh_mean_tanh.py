"""ConvTranspose2d -> MaxPool2d -> hardtanh -> mean over the image -> tanh."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout, k, stride, pad):
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cout, k, stride=stride, padding=pad)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        y = F.hardtanh(self.pool(self.up(x)), -1.0, 1.0)
        return torch.tanh(y.mean(dim=(2, 3), keepdim=True))


def get_inputs():  # KernelBench level 2 #10's sizes
    return [torch.rand(128, 64, 256, 256)]


def get_init_inputs():
    return [64, 64, 3, 1, 1]
