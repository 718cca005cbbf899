"""Malformed for the tool: get_inputs() returns a float64 tensor (op: relu). (float16 and
bfloat16 problems are tuned in their type: tests/test_half_precision.py)"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 16, dtype=torch.float64)]


def get_init_inputs():
    return []
