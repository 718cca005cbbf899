"""Triplet margin loss (margin 1.0, p=2) over (32768, 4096) anchors, positives and negatives."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch, dim = 32768, 4096


class Model(nn.Module):
    def __init__(self, margin: float):
        super().__init__()
        self.margin = margin

    def forward(self, anchor, positive, negative):
        return F.triplet_margin_loss(anchor, positive, negative, margin=self.margin)


def get_inputs():
    return [torch.randn(batch, dim), torch.randn(batch, dim), torch.randn(batch, dim)]


def get_init_inputs():
    return [1.0]
