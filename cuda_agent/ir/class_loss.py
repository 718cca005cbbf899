"""Capture of class-target losses: cross_entropy (class-index or probability targets, label
smoothing) and nll_loss, over logits of shape (N, C).

A class-index target is an int64 input. Picking x[i, target[i]] is lowered as a one-hot
reduction, sum_c where(iota_c == target[i], x[i, c], 0): the row is streamed for the
log-sum-exp anyway, so the pick costs a compare per element and no gather. The pick is pushed
through elementwise ops down to the values that vary along the classes (`pick`), so that
nll_loss(log_softmax(x)) picks x itself, in the same pass as the row maximum, and not the
log-probabilities (which would need a third pass over the row).

Rows whose target equals ignore_index contribute nothing, and a mean divides by the number of
rows that are not ignored, as torch does. The target input is marked with its domain
(`GraphInput.index_bound`, `index_ignore`) so that verification draws valid indices.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import UnsupportedError
from .capture_common import op_arg
from .graph import INDEX_DTYPE, broadcast_shapes
from .ops import is_elementwise

CLASS_DIM = 1


def _reduction(value: Any) -> int:
    return {"none": 0, "mean": 1, "sum": 2}.get(value, value)


def _logits(lw, x: int, what: str) -> tuple[int, int]:  # noqa: ANN001 - a capture _Lowering
    shape = lw.shape(x)
    if len(shape) != 2:
        raise UnsupportedError(f"unsupported: {what} of logits of shape {shape}; (N, C) only")
    return shape


def _mark_index_input(lw, t: int, bound: int, ignore: int) -> None:  # noqa: ANN001
    node = lw.g[t]
    if node.op != "input" or node.dtype != INDEX_DTYPE:
        raise UnsupportedError("unsupported: class targets computed in forward(); pass them as "
                               "an int64 input")
    k = node.attr("index")
    lw.g.inputs[k] = dataclasses.replace(lw.g.inputs[k], index_bound=bound, index_ignore=ignore)


def pick(lw, v: int, t_col: int, memo: dict[int, int]) -> int:  # noqa: ANN001
    """v[i, t[i]] with the class dim kept (shape (N, 1)), for `t_col` the (N, 1) targets."""
    if v in memo:
        return memo[v]
    n = lw.g[v]
    along = len(n.shape) - 2 + CLASS_DIM  # right-aligned position of the class dim
    if along < 0 or n.shape[along] == 1:
        out = v  # constant along the classes: every pick is the value itself
    elif is_elementwise(n.op) and n.op != "identity":
        args = tuple(pick(lw, a, t_col, memo) for a in n.args)
        shape = broadcast_shapes(*(lw.shape(a) for a in args))
        out = lw.g.add(n.op, args, shape, n.dtype, **dict(n.attrs))
    else:
        if n.dtype != "float32":
            raise UnsupportedError(f"unsupported: picking classes of a {n.dtype} value")
        classes = lw.g.add("iota", (), (1, n.shape[along]), INDEX_DTYPE, dim=CLASS_DIM)
        hit = lw.binary("eq", classes, t_col)
        out = lw.reduce("sum", lw.where(hit, v, lw.g.const(0.0)), CLASS_DIM, True)
    memo[v] = out
    return out


def _rowwise_result(lw, loss: int, valid: int | None, reduction: int, n: int) -> int:  # noqa: ANN001
    """Reduce the (N, 1) per-row losses as torch does: none -> (N,), sum, or mean over the rows
    that are not ignored (all N rows where nothing can be)."""
    if valid is not None:
        loss = lw.where(valid, loss, lw.g.const(0.0))
    if reduction == 0:
        return lw.view(loss, (n,))
    total = lw.reduce("sum", loss, None, False)
    if reduction == 2:
        return total
    if valid is None:
        return lw.binary("mul", total, lw.g.const(1.0 / n))
    return lw.binary("div", total, lw.reduce("sum", valid, None, False))


def _log_softmax_parts(lw, x: int) -> tuple[int, int, int]:  # noqa: ANN001
    """(row max m, x - m, log sum exp(x - m)), all but x - m of shape (N, 1)."""
    m = lw.reduce("max", x, CLASS_DIM, True)
    shifted = lw.binary("sub", x, m)
    log_s = lw.unary("log", lw.reduce("sum", lw.unary("exp", shifted), CLASS_DIM, True))
    return m, shifted, log_s


def _class_targets(lw, x: int, t: int, reduction: int, ignore: int, smoothing: float) -> int:  # noqa: ANN001
    n, c = _logits(lw, x, "cross_entropy")
    if lw.shape(t) != (n,):
        raise UnsupportedError(f"unsupported: class targets of shape {lw.shape(t)} for logits "
                               f"{(n, c)}")
    _mark_index_input(lw, t, c, ignore)
    t_col = lw.view(t, (n, 1))
    m, shifted, log_s = _log_softmax_parts(lw, x)
    # loss_i = lse_i - (1 - eps) x[i, t_i] - eps mean_c x[i, c], each x taken relative to m
    kept = lw.binary("mul", pick(lw, shifted, t_col, {}), lw.g.const(1.0 - smoothing))
    if smoothing:
        mean_shift = lw.binary("mul", lw.reduce("sum", shifted, CLASS_DIM, True),
                               lw.g.const(smoothing / c))
        kept = lw.binary("add", kept, mean_shift)
    valid = lw.binary("ne", t_col, lw.g.const(float(ignore)))
    return _rowwise_result(lw, lw.binary("sub", log_s, kept), valid, reduction, n)


def _probability_targets(lw, x: int, p: int, reduction: int, smoothing: float) -> int:  # noqa: ANN001
    n, c = _logits(lw, x, "cross_entropy")
    if lw.shape(p) != (n, c):
        raise UnsupportedError(f"unsupported: probability targets of shape {lw.shape(p)} for "
                               f"logits {(n, c)}")
    if smoothing:
        p = lw.binary("add", lw.binary("mul", p, lw.g.const(1.0 - smoothing)),
                      lw.g.const(smoothing / c))
    m, _, log_s = _log_softmax_parts(lw, x)
    # -sum_c p (x - m - log s) = (m + log s) sum_c p - sum_c p x: the sums of p and p x need
    # no row maximum, so they join the maximum's pass (with the online softmax, the row is
    # read once); m + log s is the log-sum-exp, of the same magnitude as the loss itself
    mass = lw.reduce("sum", p, CLASS_DIM, True)
    dot = lw.reduce("sum", lw.binary("mul", p, x), CLASS_DIM, True)
    loss = lw.binary("sub", lw.binary("mul", lw.binary("add", m, log_s), mass), dot)
    return _rowwise_result(lw, loss, None, reduction, n)


def _no_weight(args: list, kwargs: dict, what: str) -> None:
    if op_arg(args, kwargs, 2, "weight") is not None:
        raise UnsupportedError(f"unsupported: {what} with class weights")


def cross_entropy(lw, node, args, kwargs):  # noqa: ANN001 - capture's handler signature
    """aten.cross_entropy_loss(input, target, weight, reduction, ignore_index, label_smoothing)."""
    _no_weight(args, kwargs, "cross_entropy")
    x, t = lw.val(args[0]), lw.val(args[1])
    reduction = _reduction(op_arg(args, kwargs, 3, "reduction", 1))
    ignore = int(op_arg(args, kwargs, 4, "ignore_index", -100))
    smoothing = float(op_arg(args, kwargs, 5, "label_smoothing", 0.0))
    if lw.g[t].dtype == INDEX_DTYPE:
        return _class_targets(lw, x, t, reduction, ignore, smoothing)
    return _probability_targets(lw, x, t, reduction, smoothing)


def nll_loss(lw, node, args, kwargs):  # noqa: ANN001 - capture's handler signature
    """aten.nll_loss_nd / nll_loss / nll_loss_forward(input, target, weight, reduction,
    ignore_index): -input[i, target[i]], over the rows not ignored."""
    _no_weight(args, kwargs, "nll_loss")
    x, t = lw.val(args[0]), lw.val(args[1])
    n, c = _logits(lw, x, "nll_loss")
    if lw.g[t].dtype != INDEX_DTYPE or lw.shape(t) != (n,):
        raise UnsupportedError(f"unsupported: nll_loss targets of shape {lw.shape(t)}, dtype "
                               f"{lw.g[t].dtype}; int64 (N,) class indices only")
    reduction = _reduction(op_arg(args, kwargs, 3, "reduction", 1))
    ignore = int(op_arg(args, kwargs, 4, "ignore_index", -100))
    _mark_index_input(lw, t, c, ignore)
    t_col = lw.view(t, (n, 1))
    loss = lw.unary("neg", pick(lw, x, t_col, {}))
    valid = lw.binary("ne", t_col, lw.g.const(float(ignore)))
    out = _rowwise_result(lw, loss, valid, reduction, n)
    # nll_loss_forward returns (loss, total_weight); only the loss is supported downstream
    return (out, None) if "forward" in str(node.target) else out


HANDLERS = {"cross_entropy_loss": cross_entropy, "nll_loss_nd": nll_loss, "nll_loss": nll_loss,
            "nll_loss_forward": nll_loss}


def check_index_inputs(graph) -> None:  # noqa: ANN001 - a Graph
    """int64 inputs are supported as class indices only (their domain is known then)."""
    for gin in graph.inputs:
        if gin.dtype == INDEX_DTYPE and gin.index_bound is None:
            raise UnsupportedError(f"unsupported: int64 input {gin.name} used other than as the "
                                   "class targets of a loss")

