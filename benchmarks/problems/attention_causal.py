"""Causal self-attention, F.scaled_dot_product_attention(is_causal=True): 8 batches x 16 heads,
2048 tokens, head dim 128."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(8, 16, 2048, 128), torch.randn(8, 16, 2048, 128),
            torch.randn(8, 16, 2048, 128)]


def get_init_inputs():
    return []
