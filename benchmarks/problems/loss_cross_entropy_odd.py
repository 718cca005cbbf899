"""Cross-entropy with label smoothing 0.1, odd sizes: (1000, 1001) logits, int64 targets, sum."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch, classes = 1000, 1001


class Model(nn.Module):
    def __init__(self, smoothing: float):
        super().__init__()
        self.smoothing = smoothing

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets, reduction="sum", label_smoothing=self.smoothing)


def get_inputs():
    return [torch.randn(batch, classes), torch.randint(0, classes, (batch,))]


def get_init_inputs():
    return [0.1]
