"""A MobileNetV2 inverted residual block (stride 1, expansion 6), for inference: 1x1
convolution expanding the channels, batch norm, ReLU6, 3x3 depthwise convolution, batch norm,
ReLU6, 1x1 projection, batch norm, the input added."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels=32, expand=6):
        super().__init__()
        hidden = channels * expand
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels))
        self.eval()

    def forward(self, x):
        return x + self.block(x)


def get_inputs():
    return [torch.randn(32, 32, 56, 56)]


def get_init_inputs():
    return []
