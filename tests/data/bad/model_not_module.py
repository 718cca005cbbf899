"""Malformed: Model is a plain class, not a torch.nn.Module subclass."""
import torch


class Model:
    def __call__(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
