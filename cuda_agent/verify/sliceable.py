"""Depthwise convolutions that take any slice of their channels, in the worker's own copies of a
problem's module (the float64 reference, the separability test's fp32 copy), never the user's.

A depthwise convolution (groups == in_channels == out_channels) computes each channel from that
channel alone: a chunk of channels is exact for a chunk of its input and weight, but the module
fixes `groups` to the whole count, so the module refuses the chunk. Here such a module takes its
groups from its input (`groups = x.shape[1]`): on the whole input that is its own groups, so it
computes the same; on a chunk, the chunk's channels. A training-mode BatchNorm after it (a
MobileNet block) then has its float64 reference chunked along the channels on the GPU instead
of run whole in host memory (tens of seconds of CPU per case for 1 GiB).
"""

from __future__ import annotations

import types
from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.modules.conv import _ConvNd

_CONVS: dict[type[torch.nn.Module], Callable[..., torch.Tensor]] = {
    torch.nn.Conv1d: F.conv1d, torch.nn.Conv2d: F.conv2d, torch.nn.Conv3d: F.conv3d}


def _is_depthwise(m: torch.nn.Module) -> bool:
    return (type(m) in _CONVS and isinstance(m, _ConvNd) and m.groups > 1
            and m.groups == m.in_channels == m.out_channels and m.padding_mode == "zeros")


def _forward_any_channels(self: _ConvNd, x: torch.Tensor) -> torch.Tensor:
    return _CONVS[type(self)](x, self.weight, self.bias, self.stride, self.padding,
                              self.dilation, x.shape[1])


def channel_sliceable(model: torch.nn.Module) -> int:
    """Make the depthwise convolutions of `model` (a copy the worker owns) take any slice of
    their channels; returns how many there were. (A bound method: a deep copy of the model
    binds it to the copy.)"""
    count = 0
    for m in model.modules():
        if _is_depthwise(m):
            m.forward = types.MethodType(_forward_any_channels, m)
            count += 1
    return count


def has_depthwise(model: torch.nn.Module) -> bool:
    return any(_is_depthwise(m) for m in model.modules())
