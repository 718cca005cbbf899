"""A post-norm transformer encoder block (BERT-base's width): multi-head self-attention with
its output projection, residual and layer norm, a GELU MLP, residual and layer norm."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim=768, heads=12, hidden=3072):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(x).reshape(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = self.norm1(x + self.proj(a.transpose(1, 2).reshape(B, S, D)))
        return self.norm2(x + self.fc2(F.gelu(self.fc1(x))))


def get_inputs():
    return [torch.randn(16, 256, 768)]


def get_init_inputs():
    return []
