"""Scaled dot-product attention, F.scaled_dot_product_attention: 16 batches x 16 heads, 1024
tokens, head dim 64, no mask."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(16, 16, 1024, 64), torch.randn(16, 16, 1024, 64),
            torch.randn(16, 16, 1024, 64)]


def get_init_inputs():
    return []
