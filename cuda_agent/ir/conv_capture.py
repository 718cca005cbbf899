"""Capture of convolutions: aten.conv1d/2d/3d (and their 'same'/'valid' padding forms) and
aten.conv_transpose1d/2d/3d to one ``conv`` IR node (x, weight), transposed ones marked
``transposed=True``, with the bias, if any, as an epilogue add. Convolutions run as implicit
GEMMs (`ir/conv.py`), grouped and depthwise ones as a batch of per-group GEMMs."""

from __future__ import annotations

from typing import Any, Callable

from ..errors import UnsupportedError
from .capture_common import op_arg


def _tuple(v: Any, n: int) -> tuple[int, ...]:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(x) for x in v)
    return v * n if len(v) == 1 else v


def _add_bias(lw, y: int, bias: Any, rank: int) -> int:  # noqa: ANN001 - capture's lowering
    if bias is None:
        return y
    b = lw.val(bias)
    return lw.binary("add", y, lw.view(b, (lw.shape(b)[0],) + (1,) * rank))


def _check_batched(lw, x: int, rank: int, what: str) -> None:  # noqa: ANN001
    if len(lw.shape(x)) != rank + 2:
        raise UnsupportedError(f"unsupported: {what}{rank}d of an unbatched input "
                               f"{lw.shape(x)}")


def _conv(rank: int) -> Callable:
    def handle(lw, node, args, kwargs):  # noqa: ANN001 - capture's handler signature

        x, w = lw.val(args[0]), lw.val(args[1])
        bias = op_arg(args, kwargs, 2, "bias")
        stride = _tuple(op_arg(args, kwargs, 3, "stride", 1), rank)
        padding = op_arg(args, kwargs, 4, "padding", 0)
        dilation = _tuple(op_arg(args, kwargs, 5, "dilation", 1), rank)
        groups = int(op_arg(args, kwargs, 6, "groups", 1))
        _check_batched(lw, x, rank, "conv")
        ws = lw.shape(w)
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
        return _add_bias(lw, y, bias, rank)
    return handle


def _conv_transpose(rank: int) -> Callable:
    def handle(lw, node, args, kwargs):  # noqa: ANN001 - capture's handler signature

        # aten order: input, weight, bias, stride, padding, output_padding, groups, dilation;
        # output_padding only lengthens the output, whose shape the node already carries
        x, w = lw.val(args[0]), lw.val(args[1])
        bias = op_arg(args, kwargs, 2, "bias")
        stride = _tuple(op_arg(args, kwargs, 3, "stride", 1), rank)
        padding = op_arg(args, kwargs, 4, "padding", 0)
        groups = int(op_arg(args, kwargs, 6, "groups", 1))
        dilation = _tuple(op_arg(args, kwargs, 7, "dilation", 1), rank)
        _check_batched(lw, x, rank, "conv_transpose")
        out = tuple(node.meta["val"].shape)
        y = lw.g.add("conv", (x, w), out, "float32", stride=stride,
                     padding=_tuple(padding, rank), dilation=dilation, groups=groups,
                     transposed=True)
        return _add_bias(lw, y, bias, rank)
    return handle


CONV_HANDLERS: dict[str, Callable] = {
    **{f"conv{r}d": _conv(r) for r in (1, 2, 3)},
    **{f"conv_transpose{r}d": _conv_transpose(r) for r in (1, 2, 3)},
}
