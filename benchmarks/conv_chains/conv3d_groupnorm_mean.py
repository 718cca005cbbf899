"""Conv3d -> GroupNorm -> mean over everything but the batch."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin, cout, k, groups):
        super().__init__()
        self.conv = nn.Conv3d(cin, cout, k)
        self.gn = nn.GroupNorm(groups, cout)
        # affine parameters as training leaves them: at their initial ones (1, 0) the output,
        # a mean of normalised values, is zero but for rounding
        with torch.no_grad():
            self.gn.weight.add_(0.5 * torch.randn(cout))
            self.gn.bias.add_(0.1 * torch.randn(cout))

    def forward(self, x):
        return self.gn(self.conv(x)).mean(dim=[1, 2, 3, 4])


def get_inputs():  # KernelBench level 2 #23's sizes
    return [torch.rand(128, 3, 24, 32, 32)]


def get_init_inputs():
    return [3, 24, 3, 8]
