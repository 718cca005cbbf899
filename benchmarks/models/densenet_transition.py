"""A DenseNet transition layer as torchvision writes it: batch norm, an in-place ReLU, a 1x1
convolution halving the channels, 2x2 average pooling (training mode, as the field's harness
holds it). The model issue 50 found refused (`unsupported op relu_`)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels=256):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(channels, channels // 2, kernel_size=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(self.conv(self.relu(self.norm(x))))


def get_inputs():
    return [torch.randn(8, 256, 28, 28)]


def get_init_inputs():
    return []
