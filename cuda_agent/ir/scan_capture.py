"""Capture of scans: aten cumsum / cumprod / cummax / cummin -> one ``scan`` node, with reverse
and exclusive forms (cummax's and cummin's indices are refused where used).

A ``scan`` node has one argument (the scanned value, of the node's own shape) and attrs
``kind`` ("sum" | "prod" | "max" | "min"), ``dim`` (normalized), ``reverse`` and
``exclusive``. torch has no reverse or exclusive cumsum, so programs spell them with flips,
slices and concatenations; these are recognized here while lowering:

* reverse:   flip(cumsum(flip(x, d), d), d). A cumsum of a flip becomes flip(reverse scan),
  and two flips over the same dims cancel, so the outer flip leaves the reverse scan;
* exclusive: cat([zeros, cumsum(x, d)[:-1]], d), or cat([rev[1:], zeros], d) for a reverse
  scan (ones for cumprod). ``cumsum(x) - x`` needs nothing: it is an elementwise epilogue.

``flip`` and ``slice`` nodes exist only as intermediate forms: `check_leftovers` rejects a
program that uses them any other way, by name.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..errors import UnsupportedError
from .capture_common import Refused, op_arg
from .graph import Graph

SCAN_KINDS = {"cumsum": "sum", "cumprod": "prod", "cummax": "max", "cummin": "min"}
IDENTITY = {"sum": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _scan(name: str) -> Callable:
    kind = SCAN_KINDS[name]

    def handle(lw, node, args, kwargs):  # noqa: ANN001 - capture's handler signature
        x = lw.val(args[0])
        shape, dtype = lw.shape(x), lw.g[x].dtype
        want = kwargs.get("dtype")
        if want is not None and want != torch.float32:
            raise UnsupportedError(f"unsupported: {name} with dtype={want}")
        if dtype != "float32" and want is None:
            raise UnsupportedError(f"unsupported: {name} of a {dtype} tensor (integer result); "
                                   "convert it to float first")
        if dtype != "float32":
            x = lw.unary("to_float", x)
        if not shape:
            raise UnsupportedError(f"unsupported: {name} of a 0-d tensor")
        d = int(op_arg(args, kwargs, 1, "dim")) % len(shape)
        src = lw.g[x]
        if src.op == "flip" and src.attr("dims") == (d,):
            # cumsum(flip(v)) == flip(reverse_scan(v)): the outer flip of a reverse cumsum
            # cancels against this one
            scan = lw.g.add("scan", (src.args[0],), shape, "float32", kind=kind, dim=d,
                            reverse=True, exclusive=False)
            out = lw.g.add("flip", (scan,), shape, "float32", dims=(d,))
        else:
            out = lw.g.add("scan", (x,), shape, "float32", kind=kind, dim=d, reverse=False,
                           exclusive=False)
        if kind in ("max", "min"):  # aten's cummax/cummin return (values, indices)

            return out, Refused(f"unsupported: {name}'s indices (its values are supported)")
        return out
    return handle


def _flip(lw, node, args, kwargs):  # noqa: ANN001
    x = lw.val(args[0])
    shape = lw.shape(x)
    dims = op_arg(args, kwargs, 1, "dims")
    dims = [dims] if isinstance(dims, int) else list(dims)
    # flipping a dim of size 1 changes nothing
    norm = tuple(sorted({int(d) % len(shape) for d in dims if shape[int(d) % len(shape)] != 1})) \
        if shape else ()
    if not norm:
        return x
    src = lw.g[x]
    if src.op == "flip" and src.attr("dims") == norm:
        return src.args[0]
    return lw.g.add("flip", (x,), shape, src.dtype, dims=norm)


def _slice(lw, node, args, kwargs):  # noqa: ANN001
    x = lw.val(args[0])
    shape = lw.shape(x)
    d = int(op_arg(args, kwargs, 1, "dim", 0)) % max(1, len(shape))
    size = shape[d]
    start, end = op_arg(args, kwargs, 2, "start"), op_arg(args, kwargs, 3, "end")
    step = int(op_arg(args, kwargs, 4, "step", 1))
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    start, end = (s + size if s < 0 else s for s in (start, end))
    start, end = max(0, min(start, size)), max(0, min(end, size))
    if (start, end, step) == (0, size, 1):
        return x
    out_shape = tuple(int(s) for s in node.meta["val"].shape)
    return lw.g.add("slice", (x,), out_shape, lw.g[x].dtype, dim=d, start=start, end=end,
                    step=step)


def _fill(value: float, like: bool) -> Callable:
    def handle(lw, node, args, kwargs):  # noqa: ANN001
        dtype = kwargs.get("dtype")
        if like and dtype is None:
            dtype = node.meta["val"].dtype
        if dtype not in (None, torch.float32):
            raise UnsupportedError(f"unsupported: a constant tensor of dtype {dtype}")
        shape = tuple(int(s) for s in node.meta["val"].shape)
        # a constant broadcast to the shape: what the planners already read as a splat
        return lw.g.add("identity", (lw.g.const(value),), shape, "float32")
    return handle


def _fill_value(g: Graph, nid: int) -> float | None:
    n = g[nid]
    if n.op == "identity" and g[n.args[0]].op == "const":
        return g[n.args[0]].attr("value")
    if n.op == "const":
        return n.attr("value")
    return None


def _cat(lw, node, args, kwargs):  # noqa: ANN001
    """cat([fill, scan[:-1]]) or cat([reverse_scan[1:], fill]): an exclusive scan."""
    g = lw.g
    parts = [lw.val(v) for v in args[0]]
    rank = len(g[parts[0]].shape) if parts else 0
    d = int(op_arg(args, kwargs, 1, "dim", 0)) % max(1, rank)
    if len(parts) == 2:
        for fill, cut, rev, at in ((parts[0], parts[1], False, 0), (parts[1], parts[0], True, 1)):
            c = g[cut]
            if c.op != "slice" or c.attr("dim") != d or c.attr("step") != 1:
                continue
            scan = g[c.args[0]]
            if scan.op != "scan" or scan.attr("dim") != d or scan.attr("reverse") != rev or \
                    scan.attr("exclusive"):
                continue
            L = scan.shape[d]
            if (c.attr("start"), c.attr("end")) != ((1, L) if rev else (0, L - 1)):
                continue
            if _fill_value(g, fill) != IDENTITY[scan.attr("kind")] or \
                    g[fill].shape[d:d + 1] not in ((1,), ()):
                continue
            return g.add("scan", scan.args, scan.shape, "float32", kind=scan.attr("kind"),
                         dim=d, reverse=rev, exclusive=True)
    raise UnsupportedError("unsupported op cat (aten.cat): only cat([zeros, cumsum(x, d)[:-1]], "
                           "d) (an exclusive scan) is supported")


SCAN_HANDLERS: dict[str, Callable] = {
    "cumsum": _scan("cumsum"), "cumprod": _scan("cumprod"),
    "cummax": _scan("cummax"), "cummin": _scan("cummin"),
    "flip": _flip, "slice": _slice, "cat": _cat, "concat": _cat,
    "zeros_like": _fill(0.0, True), "ones_like": _fill(1.0, True),
    "zeros": _fill(0.0, False), "ones": _fill(1.0, False),
}


def check_leftovers(graph: Graph) -> None:
    """Flips and slices are only intermediate forms of reverse and exclusive scans."""
    for n in graph.live():
        if n.op == "flip":
            raise UnsupportedError("unsupported op flip (aten.flip): only as "
                                   "flip(cumsum(flip(x, d), d), d) (a reverse scan)")
        if n.op == "slice":
            raise UnsupportedError("unsupported op slice (aten.slice): only as "
                                   "cat([zeros, cumsum(x, d)[:-1]], d) (an exclusive scan)")
