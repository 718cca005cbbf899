"""Odd: LayerNorm over the last dim of a (37, 1003) tensor, with weight and bias."""
import torch
import torch.nn as nn

batch_size = 37
features = 1003


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)
        with torch.no_grad():  # non-trivial affine parameters, so dropping them is caught
            self.ln.weight.copy_(1.0 + 0.1 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.1 * torch.randn(normalized_shape))

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [(features,)]
