"""Lowering of the norms that normalise with statistics: instance norm, group norm, batch norm.

Each is expanded, as capture expands layer norm, into mean and biased variance reductions
(the mean-shifted formula: two reduction levels), an elementwise normalisation and an optional
per-channel affine. What differs is the set of reduced dims of x of shape (N, C, *S):

* instance norm: the spatial dims S (innermost, contiguous: a row reduction);
* group norm: x viewed as (N, G, C/G, prod(S)), reduced over its last two dims;
* batch norm with batch statistics: dims 0 and S around the kept channel dim (planned as a
  "chanreduce", `planning.make_plan`); with running statistics it is elementwise.

Batch norm is captured in the mode the user's module is in: in training mode (a fresh module's)
it normalises by the batch's statistics and, where it tracks running statistics, updates them
in place; the capture records that update (`graph.RunningStats`) with the nodes of the batch
mean and variance it reads. Instance norm that would update running statistics is refused.

Per-channel weights of shape (C,) are viewed as (C, 1, ..., 1) so that they broadcast along
dim 1 of x. The handlers take the capture's `_Lowering` (`lw`) and the FX node's arguments.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import UnsupportedError
from .capture_common import op_arg
from .graph import RunningStats


def _normalize(lw: Any, x: int, dims: tuple[int, ...], eps: float) -> int:
    """(x - mean) * rsqrt(var + eps) over `dims`, biased variance (divide by the count)."""
    return _normalize_stats(lw, x, dims, eps)[0]


def _normalize_stats(lw: Any, x: int, dims: tuple[int, ...], eps: float
                     ) -> tuple[int, int, int]:
    """`_normalize`'s result and the nodes of the mean and the variance it used."""
    mu = lw.mean(x, dims, True)
    dev = lw.binary("sub", x, mu)
    var = lw.mean(lw.binary("mul", dev, dev), dims, True)
    y = lw.binary("mul", dev, lw.unary("rsqrt", lw.binary("add", var, lw.g.const(eps))))
    return y, mu, var


def _per_channel(lw: Any, p: Any, shape: tuple[int, ...]) -> int:
    """A (C,) parameter as a value broadcasting along dim 1 of a tensor of `shape` (N, C, ...)."""
    v = lw.val(p)
    if lw.shape(v) != (shape[1],):
        raise UnsupportedError(f"unsupported: per-channel parameter of shape {lw.shape(v)} for "
                               f"input {shape}")
    return lw.view(v, (shape[1],) + (1,) * (len(shape) - 2))


def _affine(lw: Any, y: int, weight: Any, bias: Any, shape: tuple[int, ...]) -> int:
    if weight is not None:
        y = lw.binary("mul", y, _per_channel(lw, weight, shape))
    if bias is not None:
        y = lw.binary("add", y, _per_channel(lw, bias, shape))
    return y


def _running_stats(lw: Any, x: int, weight: Any, bias: Any, mean: Any, var: Any,
                   eps: float, what: str) -> int:
    """Normalisation by running statistics (eval mode): elementwise per channel."""
    shape = lw.shape(x)
    if mean is None or var is None:
        raise UnsupportedError(f"unsupported: {what} without batch statistics and without "
                               "running statistics")
    dev = lw.binary("sub", x, _per_channel(lw, mean, shape))
    rstd = lw.unary("rsqrt", lw.binary("add", _per_channel(lw, var, shape), lw.g.const(eps)))
    return _affine(lw, lw.binary("mul", dev, rstd), weight, bias, shape)


def _check_rank(lw: Any, x: int, what: str, least: int) -> tuple[int, ...]:
    shape = lw.shape(x)
    if len(shape) < least:
        raise UnsupportedError(f"unsupported: {what} of a rank-{len(shape)} input {shape} "
                               f"(needs (N, C{', L...' if least > 2 else ''}))")
    return shape


def instance_norm(lw: Any, node: Any, args: list, kwargs: dict) -> int:
    """aten.instance_norm(x, weight, bias, running_mean, running_var, use_input_stats,
    momentum, eps, cudnn_enabled)."""
    x = lw.val(args[0])
    shape = _check_rank(lw, x, "instance_norm", 3)
    weight, bias = op_arg(args, kwargs, 1, "weight"), op_arg(args, kwargs, 2, "bias")
    eps = float(op_arg(args, kwargs, 7, "eps", 1e-5))
    running = op_arg(args, kwargs, 3, "running_mean"), op_arg(args, kwargs, 4, "running_var")
    if any(r is not None for r in running):
        lw.g.modes = lw.modes  # eval mode reads the running statistics, training updates them
    if not bool(op_arg(args, kwargs, 5, "use_input_stats", True)):
        return _running_stats(lw, x, weight, bias, *running, eps, "instance_norm")
    if any(r is not None for r in running):
        raise UnsupportedError("unsupported: instance_norm in training mode with running "
                               "statistics (track_running_stats=True updates them); call "
                               ".eval() on it in the problem, or drop the running statistics")
    y = _normalize(lw, x, tuple(range(2, len(shape))), eps)
    return _affine(lw, y, weight, bias, shape)


def group_norm(lw: Any, node: Any, args: list, kwargs: dict) -> int:
    """aten.group_norm(x, num_groups, weight, bias, eps, cudnn_enabled)."""
    x = lw.val(args[0])
    shape = _check_rank(lw, x, "group_norm", 2)
    groups = int(op_arg(args, kwargs, 1, "num_groups"))
    weight, bias = op_arg(args, kwargs, 2, "weight"), op_arg(args, kwargs, 3, "bias")
    eps = float(op_arg(args, kwargs, 4, "eps", 1e-5))
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    if groups <= 0 or c % groups:
        raise UnsupportedError(f"unsupported: group_norm with {groups} groups of {c} channels")
    # (N, G, C/G, S): a group's channels and positions are contiguous, the innermost dims
    tail = (spatial,) if len(shape) > 2 else ()
    xv = lw.view(x, (n, groups, c // groups) + tail)
    y = _normalize(lw, xv, tuple(range(2, 3 + len(tail))), eps)
    gshape = (n, groups, c // groups) + tail
    for p, op in ((weight, "mul"), (bias, "add")):
        if p is not None:
            pv = lw.val(p)
            if lw.shape(pv) != (c,):
                raise UnsupportedError(f"unsupported: group_norm parameter of shape "
                                       f"{lw.shape(pv)} for {c} channels")
            y = lw.binary(op, y, lw.view(pv, gshape[1:3] + (1,) * len(tail)))
    return lw.sink_view(y, shape)  # elementwise ops with scalars that follow stay before it


def batch_norm(lw: Any, node: Any, args: list, kwargs: dict) -> int:
    """aten.batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps,
    cudnn_enabled). With training=True it normalises by the batch's statistics and updates the
    running buffers where it has them (recorded as a `RunningStats` update)."""
    x = lw.val(args[0])
    shape = _check_rank(lw, x, "batch_norm", 2)
    weight, bias = op_arg(args, kwargs, 1, "weight"), op_arg(args, kwargs, 2, "bias")
    eps = float(op_arg(args, kwargs, 7, "eps", 1e-5))
    rmean, rvar = op_arg(args, kwargs, 3, "running_mean"), op_arg(args, kwargs, 4, "running_var")
    if rmean is not None or rvar is not None:
        lw.g.modes = lw.modes  # eval mode reads the running statistics, training updates them
    if not bool(op_arg(args, kwargs, 5, "training", False)):
        return _running_stats(lw, x, weight, bias, rmean, rvar, eps, "batch_norm")
    dims = (0,) + tuple(range(2, len(shape)))
    y, mu, var = _normalize_stats(lw, x, dims, eps)
    if rmean is not None or rvar is not None:
        _record_running_update(lw, rmean, rvar, mu, var, op_arg(args, kwargs, 6, "momentum"),
                               math.prod(shape[d] for d in dims))
    return _affine(lw, y, weight, bias, shape)


def _record_running_update(lw: Any, rmean: Any, rvar: Any, mu: int, var: int, momentum: Any,
                           count: int) -> None:
    """Training-mode batch norm updates its running buffers in place: record the update, so
    that the kernels keep the batch statistics and the emitted module applies it."""
    if rmean is None or rvar is None:
        raise UnsupportedError("unsupported: batch_norm in training mode with only one of "
                               "running_mean and running_var")
    names = [lw.buffer_target(r, "batch_norm in training mode updates its running "
                                 "statistics") for r in (rmean, rvar)]
    if momentum is None:
        raise UnsupportedError("unsupported: batch_norm in training mode with momentum=None "
                               "(a cumulative average of the running statistics)")
    if count <= 1:
        raise UnsupportedError(f"unsupported: batch_norm in training mode over {count} value "
                               "per channel (torch raises: it needs more than one)")
    lw.g.updates.append(RunningStats(mu, var, names[0], names[1], float(momentum), count))


HANDLERS = {"instance_norm": instance_norm, "group_norm": group_norm, "batch_norm": batch_norm}
