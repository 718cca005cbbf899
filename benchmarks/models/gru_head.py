"""A two-layer GRU over a sequence with a per-step head: linear, GELU, linear to the classes,
log-softmax. The GRU is cuDNN's (a torch region); the head is generated."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features=128, hidden=256, classes=64):
        super().__init__()
        self.gru = nn.GRU(features, hidden, num_layers=2, batch_first=True)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, classes)
        self.eval()

    def forward(self, x):
        out, _ = self.gru(x)
        return torch.log_softmax(self.fc2(F.gelu(self.fc1(out))), dim=-1)


def get_inputs():
    return [torch.randn(64, 128, 128)]


def get_init_inputs():
    return []
