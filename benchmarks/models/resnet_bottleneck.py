"""A ResNet bottleneck block as torchvision writes it (ResNet-50's first stage), for inference:
1x1 convolution reducing the channels, 3x3 convolution, 1x1 convolution expanding them, each
with batch norm, ReLUs, the identity added."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels=256, width=64):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.eval()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x
        return self.relu(out)


def get_inputs():
    return [torch.randn(16, 256, 56, 56)]


def get_init_inputs():
    return []
