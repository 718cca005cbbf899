"""A decoder-only language model's step: token and position embeddings, one pre-norm
transformer block with causal attention and its output projection, a GELU MLP, the final layer
norm and the vocabulary head (GPT-2's layout at a LLaMA-sized vocabulary). Token ids are int64;
the embedding lookups are torch's."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, vocab=32000, dim=512, heads=8, context=512):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids):
        B, S = ids.shape
        x = self.tok(ids) + self.pos(torch.arange(S, device=ids.device))
        D = x.shape[-1]
        q, k, v = self.qkv(self.norm1(x)).reshape(B, S, 3, self.heads, D // self.heads).permute(
            2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, S, D))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return self.head(self.norm(x))


def get_inputs():
    return [torch.randint(0, 32000, (8, 512))]


def get_init_inputs():
    return []
