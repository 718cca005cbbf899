"""A DenseNet dense block as torchvision writes it (DenseNet-121's second block, four layers),
for inference: each layer batch norm, ReLU, 1x1 convolution, batch norm, ReLU, 3x3
convolution, its features concatenated to all before."""
import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, channels, growth, bottleneck=4):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels)
        self.conv1 = nn.Conv2d(channels, bottleneck * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bottleneck * growth)
        self.conv2 = nn.Conv2d(bottleneck * growth, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = torch.cat(features, 1)
        x = self.conv1(torch.relu(self.norm1(x)))
        return self.conv2(torch.relu(self.norm2(x)))


class Model(nn.Module):
    def __init__(self, channels=128, growth=32, layers=4):
        super().__init__()
        self.layers = nn.ModuleList(Layer(channels + i * growth, growth) for i in range(layers))
        self.eval()

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


def get_inputs():
    return [torch.randn(32, 128, 28, 28)]


def get_init_inputs():
    return []
