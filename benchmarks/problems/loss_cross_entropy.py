"""Cross-entropy of (65536, 4096) logits against int64 class targets, mean over the batch."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch, classes = 65536, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch, classes), torch.randint(0, classes, (batch,))]


def get_init_inputs():
    return []
