"""Capture of pooling: aten max_pool{1,2,3}d(_with_indices) and avg_pool{1,2,3}d -> one ``pool``;
adaptive pooling -> a reduction (an output of 1) or a fixed-window ``pool`` (`_adaptive_pool`).

torch.export keeps pooling as one aten op per variant; each becomes one IR node ``pool`` whose
attrs carry everything the template needs (kind, spatial rank, kernel, stride, padding,
dilation, ceil_mode, count_include_pad, divisor_override) and whose shape is torch's output
shape (taken from the traced value, so ceil_mode's edge rules are torch's own). The indices
output of ``*_with_indices`` becomes a ``pool`` node with ``indices=True``, which the planner
rejects by name if anything uses it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import UnsupportedError
from .capture_common import op_arg
from .graph import INDEX_DTYPE


def _tuple(value: Any, rank: int, what: str, default: tuple[int, ...] | None = None
           ) -> tuple[int, ...]:
    """torch's int-or-list pooling parameters as a tuple of `rank` ints (a single value is
    repeated; an empty list means `default`, as torch's empty stride means the kernel size)."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        if default is None:
            raise UnsupportedError(f"unsupported: pooling without a {what}")
        return default
    if isinstance(value, int):
        return (int(value),) * rank
    vals = tuple(int(v) for v in value)
    if len(vals) == 1:
        return vals * rank
    if len(vals) != rank:
        raise UnsupportedError(f"unsupported: pooling {what} {list(vals)} for {rank}-D pooling")
    return vals


def _output_shape(node: torch.fx.Node) -> tuple[int, ...]:
    val = node.meta["val"]
    if isinstance(val, (tuple, list)):
        val = val[0]
    return tuple(int(s) for s in val.shape)


def _pool_node(lw: Any, node: torch.fx.Node, x: int, kind: str, rank: int,
               kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
               dilation: tuple[int, ...], ceil_mode: bool, count_include_pad: bool,
               divisor_override: int | None, indices: bool = False) -> int:
    in_shape = lw.shape(x)
    if len(in_shape) not in (rank + 1, rank + 2):
        raise UnsupportedError(f"unsupported: {rank}-D pooling of a tensor of shape {in_shape}")
    if lw.g[x].dtype != "float32":
        raise UnsupportedError(f"unsupported: pooling of a {lw.g[x].dtype} tensor")
    shape = _output_shape(node)
    return lw.g.add("pool", (x,), shape, INDEX_DTYPE if indices else "float32",
                    kind=kind, rank=rank, kernel=kernel, stride=stride, padding=padding,
                    dilation=dilation, ceil_mode=bool(ceil_mode),
                    count_include_pad=bool(count_include_pad),
                    divisor_override=None if divisor_override is None else int(divisor_override),
                    indices=indices)


def _max_pool(rank: int, with_indices: bool) -> Callable:
    # max_pool{r}d(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
    def handle(lw: Any, node: torch.fx.Node, args: list, kwargs: dict) -> Any:
        x = lw.val(args[0])
        kernel = _tuple(op_arg(args, kwargs, 1, "kernel_size"), rank, "kernel size")
        stride = _tuple(op_arg(args, kwargs, 2, "stride"), rank, "stride", kernel)
        padding = _tuple(op_arg(args, kwargs, 3, "padding", 0), rank, "padding")
        dilation = _tuple(op_arg(args, kwargs, 4, "dilation", 1), rank, "dilation")
        ceil = bool(op_arg(args, kwargs, 5, "ceil_mode", False))
        params = (x, "max", rank, kernel, stride, padding, dilation, ceil, True, None)
        out = _pool_node(lw, node, *params)
        if not with_indices:
            return out
        return out, _pool_node(lw, node, *params, indices=True)
    return handle


def _avg_pool(rank: int) -> Callable:
    # avg_pool{r}d(self, kernel_size, stride=[], padding=0, ceil_mode=False,
    #              count_include_pad=True, divisor_override=None)  (1d has no divisor_override)
    def handle(lw: Any, node: torch.fx.Node, args: list, kwargs: dict) -> Any:
        x = lw.val(args[0])
        kernel = _tuple(op_arg(args, kwargs, 1, "kernel_size"), rank, "kernel size")
        stride = _tuple(op_arg(args, kwargs, 2, "stride"), rank, "stride", kernel)
        padding = _tuple(op_arg(args, kwargs, 3, "padding", 0), rank, "padding")
        ceil = bool(op_arg(args, kwargs, 4, "ceil_mode", False))
        include = bool(op_arg(args, kwargs, 5, "count_include_pad", True))
        divisor = op_arg(args, kwargs, 6, "divisor_override", None)
        if divisor is not None and int(divisor) == 0:
            raise UnsupportedError("unsupported: avg pooling with divisor_override=0")
        return _pool_node(lw, node, x, "avg", rank, kernel, stride, padding, (1,) * rank, ceil,
                          include, divisor)
    return handle


def _adaptive_pool(rank: int, kind: str) -> Callable:
    """adaptive_{avg,max}_pool{r}d(self, output_size): an output of 1 along every pooled dim is
    a mean (max) over them, a row reduction; sizes dividing the input's are a fixed window
    (kernel = stride = input // output); other sizes, whose windows vary in length, are
    refused by name."""
    def handle(lw: Any, node: torch.fx.Node, args: list, kwargs: dict) -> Any:
        x = lw.val(args[0])
        shape = lw.shape(x)
        out = _tuple(op_arg(args, kwargs, 1, "output_size"), rank, "output size")
        if len(shape) not in (rank + 1, rank + 2):
            raise UnsupportedError(f"unsupported: {rank}-D adaptive pooling of a tensor of "
                                   f"shape {shape}")
        spatial = shape[-rank:]
        if any(i % o for i, o in zip(spatial, out)):
            raise UnsupportedError(
                f"unsupported: adaptive {kind} pooling of {tuple(spatial)} to {out} (windows "
                "of varying length; output sizes that divide the input's are supported)")
        window = tuple(i // o for i, o in zip(spatial, out))
        params = (x, kind, rank, window, window, (0,) * rank, (1,) * rank, False, True, None)
        if all(o == 1 for o in out):  # global: a reduction over the pooled dims
            dims = tuple(range(len(shape) - rank, len(shape)))
            y = lw.mean(x, dims, True) if kind == "avg" else lw.reduce("max", x, dims, True)
        else:
            y = _pool_node(lw, node, *params)
        if kind == "max":  # aten's adaptive max pooling returns (values, indices)
            return y, _pool_node(lw, node, *params, indices=True)
        return y
    return handle


POOL_HANDLERS: dict[str, Callable] = {
    **{f"max_pool{r}d": _max_pool(r, False) for r in (1, 2, 3)},
    **{f"max_pool{r}d_with_indices": _max_pool(r, True) for r in (1, 2, 3)},
    **{f"avg_pool{r}d": _avg_pool(r) for r in (1, 2, 3)},
    **{f"_adaptive_avg_pool{r}d": _adaptive_pool(r, "avg") for r in (1, 2, 3)},
    **{f"adaptive_avg_pool{r}d": _adaptive_pool(r, "avg") for r in (1, 2, 3)},
    **{f"adaptive_max_pool{r}d": _adaptive_pool(r, "max") for r in (1, 2, 3)},
}
