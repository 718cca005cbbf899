"""Linear 4096 -> 4096 with SiLU on 192 rows (a decoder's small batch): a held-out GEMM shape,
few output tiles for 132 SMs."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4096, 4096)

    def forward(self, x):
        return torch.nn.functional.silu(self.fc(x))


def get_inputs():
    return [torch.randn(192, 4096)]


def get_init_inputs():
    return []
