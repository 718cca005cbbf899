"""4-D tensor times matrix (einsum "bijl,lk->bijk" as a matmul): (8 x 64 x 64 x 512) @ (512 x 768)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(8, 64, 64, 512), torch.randn(512, 768)]


def get_init_inputs():
    return []
