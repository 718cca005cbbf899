"""Capture of convolutions: aten.conv1d/2d/3d (and their 'same'/'valid' padding forms) to one
``conv`` IR node (x, weight) with the bias, if any, as an epilogue add. Convolutions run as
implicit GEMMs (`ir/conv.py`), grouped and depthwise ones as a batch of per-group GEMMs."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnsupportedError


def _tuple(v: Any, n: int) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _conv(rank: int) -> Callable:
    def handle(lw, node, args, kwargs):  # noqa: ANN001 - capture's handler signature
        from .capture import _arg

        x, w = lw.val(args[0]), lw.val(args[1])
        bias = _arg(args, kwargs, 2, "bias")
        stride = _tuple(_arg(args, kwargs, 3, "stride", 1), rank)
        padding = _arg(args, kwargs, 4, "padding", 0)
        dilation = _tuple(_arg(args, kwargs, 5, "dilation", 1), rank)
        groups = int(_arg(args, kwargs, 6, "groups", 1))
        xs, ws = lw.shape(x), lw.shape(w)
        if len(xs) != rank + 2:
            raise UnsupportedError(f"unsupported: conv{rank}d of an unbatched input {xs}")
        out = tuple(node.meta["val"].shape)
        if isinstance(padding, str):  # 'valid' or 'same': recover torch's left padding
            if padding == "valid":
                padding = (0,) * rank
            else:
                total = [d * (k - 1) for d, k in zip(dilation, ws[2:])]
                padding = tuple(t // 2 for t in total)
        padding = _tuple(padding, rank)
        y = lw.g.add("conv", (x, w), out, "float32", stride=stride, padding=padding,
                     dilation=dilation, groups=groups)
        if bias is not None:
            b = lw.val(bias)
            y = lw.binary("add", y, lw.view(b, (lw.shape(b)[0],) + (1,) * rank))
        return y
    return handle


CONV_HANDLERS: dict[str, Callable] = {"conv1d": _conv(1), "conv2d": _conv(2), "conv3d": _conv(3)}
