"""A UNet down and up step, for inference: 2x2 max pooling, two 3x3 convolutions with batch
norm and ReLU, a 2x2 transposed convolution back up, the skip connection concatenated, two 3x3
convolutions with batch norm and ReLU."""
import torch
import torch.nn as nn


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Model(nn.Module):
    def __init__(self, channels=64):
        super().__init__()
        self.pool = nn.MaxPool2d(2)
        self.down = double_conv(channels, 2 * channels)
        self.up = nn.ConvTranspose2d(2 * channels, channels, 2, stride=2)
        self.conv = double_conv(2 * channels, channels)
        self.eval()

    def forward(self, x):
        y = self.up(self.down(self.pool(x)))
        return self.conv(torch.cat([x, y], dim=1))


def get_inputs():
    return [torch.randn(8, 64, 128, 128)]


def get_init_inputs():
    return []
