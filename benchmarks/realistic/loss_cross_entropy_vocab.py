"""Cross-entropy of (16384, 32000) logits against int64 class targets (2 GiB of logits)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(16384, 32000), torch.randint(0, 32000, (16384,))]


def get_init_inputs():
    return []
