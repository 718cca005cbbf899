"""A small Vision Transformer: patches cut with unfold, a linear patch embedding, a class token,
position embeddings, one pre-norm encoder block (attention with its output projection, an MLP),
the class token's head. The model issue 50 found refused (`unsupported op unfold`)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, image=64, patch=8, dim=192, heads=3, classes=100):
        super().__init__()
        self.patch, self.heads = patch, heads
        n = (image // patch) ** 2
        self.embed = nn.Linear(3 * patch * patch, dim)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        B, C, H, W = x.shape
        p = self.patch
        x = x.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
        x = x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * p * p)
        x = self.embed(x)
        x = torch.cat([self.cls.expand(B, -1, -1), x], dim=1) + self.pos
        S, D = x.shape[1], x.shape[2]
        h = self.norm1(x)
        q, k, v = self.qkv(h).reshape(B, S, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, D))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return self.head(self.norm(x)[:, 0])


def get_inputs():
    return [torch.randn(8, 3, 64, 64)]


def get_init_inputs():
    return []
