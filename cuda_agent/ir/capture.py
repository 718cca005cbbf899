"""Capture: trace a problem's reference with torch.export and lower it to the op IR.

The graph is torch.export's (non-strict, training IR), recorded by `pretrace.py` without
torch.export's first-call import of Dynamo; what that tracer leaves to torch.export, and any
error, is traced by torch.export itself. Under `torch.autocast("cuda")` either graph gets the
casts torch's autocast policy applies as explicit `_to_copy` ops (`autocast.py`). Tracing runs
on the meta device, so a problem that moves gigabytes on the GPU is captured without
allocating them. The module is traced in the
mode `Model(*get_init_inputs())` leaves it in, as the field's harness runs it: training mode
unless its constructor calls `.eval()` (batch norm then normalises by the batch's statistics
and updates its running ones; dropout with p > 0 is random and refused). Composite ops
(softmax, layer norm, vector norms, ...) are expanded into elementwise ops and single-kind
reductions here, so templates see one small vocabulary. Any op outside it raises
`UnsupportedError` naming the op: there is no silent fallback to torch.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import operator
import re
import warnings
from typing import TYPE_CHECKING, Any, Callable

import torch

from ..errors import ProblemError, UnsupportedError, data_dependent, first_line
from . import autocast
from .capture_common import Refused, op_arg
from .graph import (HALF_DTYPES, INDEX_DTYPE, STORAGE_FLOATS, Graph, GraphInput, Increment,
                    Node, broadcast_shapes, view_runs)
from .class_loss import HANDLERS as _CLASS_LOSS_HANDLERS, check_index_inputs
from .attention_capture import ATTENTION_HANDLERS, fold_manual
from .normstat import HANDLERS as _NORMSTAT_HANDLERS
from .ops import BINARY, COMPARISONS, UNARY
from .conv_capture import CONV_HANDLERS
from .pool_capture import POOL_HANDLERS
from .scan_capture import SCAN_HANDLERS, check_leftovers

if TYPE_CHECKING:
    from .pretrace import TracedProgram

DTYPE_NAMES = {torch.float32: "float32", torch.int64: INDEX_DTYPE, torch.bool: "bool",
               torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float64: "float64",
               torch.int32: "int32"}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


class _Lowering:
    """Turns one exported FX graph into a `Graph`; one method per family of aten ops."""

    def __init__(self, modes: tuple[bool, ...] | None = None) -> None:
        self.g = Graph()
        self.env: dict[str, Any] = {}
        self.buffers: dict[str, str] = {}  # placeholder name -> state_dict name, for buffers
        # the module's train/eval flags, recorded in the graph by ops whose result depends on
        # them (`Graph.modes`)
        self.modes = modes

    def buffer_target(self, arg: Any, what: str) -> str:
        """The state_dict name of the module buffer `arg` (an FX placeholder): an op that
        updates its argument in place is supported on a buffer, not on a forward() argument
        or a computed value."""
        if isinstance(arg, torch.fx.Node) and arg.name in self.buffers:
            return self.buffers[arg.name]
        name = arg.name if isinstance(arg, torch.fx.Node) else repr(arg)
        raise UnsupportedError(f"unsupported: {what} in place, and {name} is not a buffer of "
                               "the module")

    # -- helpers ------------------------------------------------------------------------------
    def val(self, arg: Any) -> int:
        """IR node id for an FX argument: a node already lowered, or a Python scalar."""
        if isinstance(arg, torch.fx.Node):
            value = self.env[arg.name]
            if isinstance(value, Refused):
                raise UnsupportedError(value.reason)
            if isinstance(value, tuple):
                raise UnsupportedError(f"unsupported: tuple value {arg.name} used as a tensor")
            return value
        if isinstance(arg, bool):
            return self.g.const(1.0 if arg else 0.0)
        if isinstance(arg, (int, float)):
            return self.g.const(float(arg))
        raise UnsupportedError(f"unsupported argument {arg!r} of type {type(arg).__name__}")

    def shape(self, nid: int) -> tuple[int, ...]:
        return self.g[nid].shape

    def unary(self, op: str, x: int, **attrs: Any) -> int:
        n = self.g[x]
        if n.op == "view" and n.attr("sink"):  # keep the reshape last (see `sink_view`)
            return self.sink_view(self.unary(op, n.args[0], **attrs), n.shape)
        dtype = "bool" if op == "logical_not" else ("float32" if op == "to_float" else n.dtype)
        if dtype == INDEX_DTYPE and op not in ("identity",):
            x, dtype = self.unary("to_float", x), "float32"
        return self.g.add(op, (x,), n.shape, dtype, **attrs)

    def binary(self, op: str, a: int, b: int) -> int:
        sa, sb = self.shape(a), self.shape(b)
        for this, other in ((a, b), (b, a)):
            n = self.g[this]
            if n.op == "view" and n.attr("sink") and all(s == 1 for s in self.shape(other)) \
                    and len(self.shape(other)) <= len(n.shape):
                # a scalar operand: compute in the source's shape, keep the reshape last
                src = n.args[0]
                scalar = self.view(other, ()) if self.shape(other) else other
                pair = (src, scalar) if this == a else (scalar, src)
                return self.sink_view(self.binary(op, *pair), n.shape)
            regrouped = self._regrouped(n, other) if n.op == "view" and n.attr("sink") \
                else None
            if regrouped is not None:
                # a broadcast operand (a per-channel scale after group norm) read in the
                # source's shape: computed there, the reshape kept last
                src = n.args[0]
                pair = (src, regrouped) if this == a else (regrouped, src)
                return self.sink_view(self.binary(op, *pair), n.shape)
        try:
            shape = broadcast_shapes(sa, sb)
        except ValueError:
            raise UnsupportedError(f"shapes {sa} and {sb} do not broadcast for {op}") from None
        da, db = self.g[a].dtype, self.g[b].dtype
        if op in ("logical_and", "logical_or"):
            return self.g.add(op, (a, b), shape, "bool")
        # Mixed int64/float arithmetic promotes to float32, as torch does.
        if da == INDEX_DTYPE and db != INDEX_DTYPE:
            a = self.unary("to_float", a)
        if db == INDEX_DTYPE and da != INDEX_DTYPE:
            b = self.unary("to_float", b)
        if da == db == INDEX_DTYPE and op not in COMPARISONS:
            raise UnsupportedError(f"unsupported: integer arithmetic ({op}) on index tensors")
        dtype = "bool" if op in COMPARISONS else "float32"
        return self.g.add(op, (a, b), shape, dtype)

    def where(self, c: int, a: int, b: int) -> int:
        try:
            shape = broadcast_shapes(self.shape(c), self.shape(a), self.shape(b))
        except ValueError:
            raise UnsupportedError("where(): operands do not broadcast") from None
        return self.g.add("where", (c, a, b), shape, "float32")

    def norm_dims(self, x: int, dims: Any) -> tuple[int, ...]:
        rank = len(self.shape(x))
        if dims is None or dims == [] or dims == ():
            return tuple(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        out = sorted({d % rank if rank else 0 for d in dims})
        return tuple(out)

    def reduce(self, kind: str, x: int, dims: Any, keepdim: bool) -> int:
        shape = self.shape(x)
        d = self.norm_dims(x, dims)
        # Reducing a dim of size 1 changes nothing but the shape: keep only the real ones.
        real = tuple(k for k in d if shape[k] != 1)
        if real != d and shape:
            final = tuple(1 if k in d else s for k, s in enumerate(shape)) if keepdim else \
                tuple(s for k, s in enumerate(shape) if k not in d)
            if not real:
                if kind in ("argmax", "argmin"):
                    raise UnsupportedError(f"unsupported: {kind} over dims of size 1")
                return self.view(x, final) if final != shape else x
            inner = self.reduce(kind, x, real, True)
            return self.view(inner, final)
        if self.g[x].dtype == "bool":
            x = self.unary("to_float", x)
        if keepdim:
            out = tuple(1 if k in d else s for k, s in enumerate(shape))
        else:
            out = tuple(s for k, s in enumerate(shape) if k not in d)
        dtype = INDEX_DTYPE if kind in ("argmax", "argmin") else "float32"
        if not shape:  # reducing a 0-d tensor is the identity
            return x
        return self.g.add("reduce", (x,), out, dtype, kind=kind, dims=d, keepdim=bool(keepdim))

    def count(self, x: int, dims: tuple[int, ...]) -> int:
        return math.prod(self.shape(x)[k] for k in dims) if dims else 1

    def mean(self, x: int, dims: Any, keepdim: bool) -> int:
        d = self.norm_dims(x, dims)
        s = self.reduce("sum", x, d, keepdim)
        return self.binary("mul", s, self.g.const(1.0 / self.count(x, d)))

    def var(self, x: int, dims: Any, correction: float, keepdim: bool) -> int:
        d = self.norm_dims(x, dims)
        mu = self.mean(x, d, True)
        dev = self.binary("sub", x, mu)
        ss = self.reduce("sum", self.binary("mul", dev, dev), d, keepdim)
        n = self.count(x, d) - correction
        return self.binary("mul", ss, self.g.const(1.0 / n if n > 0 else float("nan")))

    def _regrouped(self, view: Node, other: int) -> int | None:
        """`other`, broadcast against the sunk `view` (source shape S, shape T), viewed in S's
        terms, or None. S and T split into runs of equal size (group norm's (N, G, C/G, HW)
        against (N, C, H, W): N | G, C/G = C | HW = H, W); `other` must be, in each run,
        either all broadcast (size 1) or whole, and broadcast somewhere (a full operand stays
        as it was). A (C, 1, 1) scale is then (1, G, C/G, 1)."""
        src_shape, shape = self.shape(view.args[0]), view.shape
        oshape = self.shape(other)
        if len(oshape) > len(shape) or all(s == 1 for s in oshape):
            return None
        padded = (1,) * (len(shape) - len(oshape)) + oshape
        if padded == shape or any(o not in (1, t) for o, t in zip(padded, shape)):
            return None
        new: list[int] = []
        for si, ti in view_runs(src_shape, shape):
            part = [padded[j] for j in ti]
            if all(p == 1 for p in part):
                new += [1] * len(si)
            elif part == [shape[j] for j in ti]:
                new += [src_shape[i] for i in si]
            else:
                return None  # broadcast within a run: not a view of the source's shape
        return self.view(other, tuple(new))

    def sink_view(self, x: int, shape: tuple[int, ...]) -> int:
        """A reshape of a kernel's result that elementwise ops with scalar operands are computed
        under (moved after them): group norm computes in its (N, G, C/G, S) shape, and a
        reshape in the middle of a computation cannot be planned, a final one can."""
        if shape == self.shape(x):
            return x
        if math.prod(shape) != self.g[x].numel:
            raise UnsupportedError(f"unsupported view of {self.shape(x)} as {shape}")
        return self.g.add("view", (x,), shape, self.g[x].dtype, sink=True)

    def view(self, x: int, shape: tuple[int, ...]) -> int:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != self.g[x].numel:
            raise UnsupportedError(f"unsupported view of {self.shape(x)} as {shape}")
        if shape == self.shape(x):
            return x
        n = self.g[x]
        if n.op == "view" and not n.attr("sink") and self.g[n.args[0]].op == "input":
            # a reshape of a reshaped input is one reshape of it (x.unsqueeze(1).unsqueeze(1)):
            # the planner reads an input through one view
            return self.view(n.args[0], shape)
        return self.g.add("view", (x,), shape, self.g[x].dtype)

    # -- ops ----------------------------------------------------------------------------------
    def lower_call(self, node: torch.fx.Node) -> Any:
        target = node.target
        if target is operator.getitem:
            seq, idx = node.args
            assert isinstance(seq, torch.fx.Node), seq  # an item of a multi-output op
            return self.env[seq.name][idx]
        name = getattr(getattr(target, "overloadpacket", None), "__name__", None) or str(target)
        args, kwargs = list(node.args), dict(node.kwargs)
        handler = _HANDLERS.get(name)
        if handler is None:
            raise UnsupportedError(
                f"unsupported op {name} (aten.{name}); supported: elementwise math and "
                "activations, sum/mean/prod/max/min/argmax/argmin/var/std, softmax, "
                "log_softmax, layer_norm, rms_norm, instance/group/batch norm, vector norms, "
                "losses, matrix products and einsum, conv1d/2d/3d and their transposes, "
                "pooling (adaptive too), cumsum/cumprod, attention")
        return handler(self, node, args, kwargs)


def _unary_handler(op: str, **fixed: Any) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        return lw.unary(op, lw.val(args[0]), **fixed)
    return handle


def _binary_handler(op: str) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        a, b = lw.val(args[0]), lw.val(args[1])
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if op in ("add", "sub") and alpha != 1:
            b = lw.binary("mul", b, lw.g.const(alpha))
        return lw.binary(op, a, b)
    return handle


def _reduce_handler(kind: str, dim_pos: int = 1, keep_pos: int = 2) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        x = lw.val(args[0])
        dims = op_arg(args, kwargs, dim_pos, "dim")
        keep = bool(op_arg(args, kwargs, keep_pos, "keepdim", False))
        return lw.reduce(kind, x, dims, keep)
    return handle


def _max_dim(kind: str, index_kind: str) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        x = lw.val(args[0])
        if len(args) < 2 and "dim" not in kwargs:  # max.default: full reduction to a scalar
            return lw.reduce(kind, x, None, False)
        if isinstance(args[1], torch.fx.Node):  # max.other / min.other: elementwise, two tensors
            return lw.binary("maximum" if kind == "max" else "minimum", x, lw.val(args[1]))
        dim, keep = op_arg(args, kwargs, 1, "dim"), bool(op_arg(args, kwargs, 2, "keepdim", False))
        values = lw.reduce(kind, x, dim, keep)
        try:
            index: int | Refused = lw.reduce(index_kind, x, dim, keep)
        except UnsupportedError as exc:  # e.g. over a dim of size 1: refused only if used
            index = Refused(str(exc))
        return values, index
    return handle


def _softmax(log: bool) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        x, dim = lw.val(args[0]), args[1]
        m = lw.reduce("max", x, dim, True)
        shifted = lw.binary("sub", x, m)
        e = lw.unary("exp", shifted)
        s = lw.reduce("sum", e, dim, True)
        if log:
            return lw.binary("sub", shifted, lw.unary("log", s))
        return lw.binary("div", e, s)
    return handle


def _layer_norm(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    norm_shape = op_arg(args, kwargs, 1, "normalized_shape")
    weight, bias = op_arg(args, kwargs, 2, "weight"), op_arg(args, kwargs, 3, "bias")
    eps = float(op_arg(args, kwargs, 4, "eps", 1e-5))
    rank = len(lw.shape(x))
    dims = tuple(range(rank - len(norm_shape), rank))
    mu = lw.mean(x, dims, True)
    dev = lw.binary("sub", x, mu)
    var = lw.mean(lw.binary("mul", dev, dev), dims, True)
    y = lw.binary("mul", dev, lw.unary("rsqrt", lw.binary("add", var, lw.g.const(eps))))
    if weight is not None:
        y = lw.binary("mul", y, lw.val(weight))
    if bias is not None:
        y = lw.binary("add", y, lw.val(bias))
    return (y, None, None) if "native" in str(node.target) else y


def _rms_norm(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    norm_shape = op_arg(args, kwargs, 1, "normalized_shape")
    weight = op_arg(args, kwargs, 2, "weight")
    eps = op_arg(args, kwargs, 3, "eps")
    eps = float(torch.finfo(torch.float32).eps if eps is None else eps)
    rank = len(lw.shape(x))
    dims = tuple(range(rank - len(norm_shape), rank))
    ms = lw.mean(lw.binary("mul", x, x), dims, True)
    y = lw.binary("mul", x, lw.unary("rsqrt", lw.binary("add", ms, lw.g.const(eps))))
    if weight is not None:
        y = lw.binary("mul", y, lw.val(weight))
    return y


def _vector_norm(lw: _Lowering, x: int, p: Any, dims: Any, keep: bool) -> int:
    p = 2.0 if p is None or p == "fro" else float(p)
    if p == 2.0:
        return lw.unary("sqrt", lw.reduce("sum", lw.binary("mul", x, x), dims, keep))
    if p == 1.0:
        return lw.reduce("sum", lw.unary("abs", x), dims, keep)
    if p == float("inf"):
        return lw.reduce("max", lw.unary("abs", x), dims, keep)
    if p == float("-inf"):
        return lw.reduce("min", lw.unary("abs", x), dims, keep)
    if p <= 0:
        raise UnsupportedError(f"unsupported: vector norm of order {p}")
    s = lw.reduce("sum", lw.unary("pow_scalar", lw.unary("abs", x), exponent=p), dims, keep)
    return lw.unary("pow_scalar", s, exponent=1.0 / p)


def _linalg_vector_norm(lw: _Lowering, node, args, kwargs):
    return _vector_norm(lw, lw.val(args[0]), op_arg(args, kwargs, 1, "ord", 2),
                        op_arg(args, kwargs, 2, "dim"),
                        bool(op_arg(args, kwargs, 3, "keepdim", False)))


def _norm(lw: _Lowering, node, args, kwargs):
    return _vector_norm(lw, lw.val(args[0]), op_arg(args, kwargs, 1, "p", 2),
                        op_arg(args, kwargs, 2, "dim"),
                        bool(op_arg(args, kwargs, 3, "keepdim", False)))


def _var_std(std: bool) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        x = lw.val(args[0])
        dims = op_arg(args, kwargs, 1, "dim")
        correction = kwargs.get("correction", 1)
        # aten.var.dim(x, dim, unbiased, keepdim) passes these positionally
        unbiased = kwargs.get("unbiased", args[2] if len(args) > 2 else None)
        if unbiased is not None:
            correction = 1 if unbiased else 0
        correction = 1 if correction is None else float(correction)
        keepdim = kwargs.get("keepdim", args[3] if len(args) > 3 else False)
        v = lw.var(x, dims, correction, bool(keepdim))
        return lw.unary("sqrt", v) if std else v
    return handle


def _log_sigmoid(lw: _Lowering, x: int) -> int:
    """log(sigmoid(x)) = -softplus(-x): finite where sigmoid underflows (softplus's linear
    branch past its threshold)."""
    return lw.unary("neg", lw.unary("softplus", lw.unary("neg", x), beta=1.0, threshold=20.0))


def _var_mean(lw: _Lowering, node, args, kwargs):
    """torch.var_mean: (var, mean), with var's arguments."""
    keepdim = bool(kwargs.get("keepdim", args[3] if len(args) > 3 else False))
    return (_var_std(False)(lw, node, args, kwargs),
            lw.mean(lw.val(args[0]), op_arg(args, kwargs, 1, "dim"), keepdim))


def _bool_binary(op: str) -> Callable:
    """`&`, `|` on masks: the logical op (on other dtypes, integer bit arithmetic: refused)."""
    def handle(lw: _Lowering, node, args, kwargs):
        a, b = lw.val(args[0]), lw.val(args[1])
        if lw.g[a].dtype != "bool" or lw.g[b].dtype != "bool":
            raise UnsupportedError(f"unsupported: bitwise {op.split('_')[1]} of non-boolean "
                                   "tensors")
        return lw.binary(op, a, b)
    return handle


def _logsumexp(lw: _Lowering, node, args, kwargs):
    x, dims = lw.val(args[0]), op_arg(args, kwargs, 1, "dim")
    keep = bool(op_arg(args, kwargs, 2, "keepdim", False))
    m = lw.reduce("max", x, dims, True)
    s = lw.reduce("sum", lw.unary("exp", lw.binary("sub", x, m)), dims, True)
    out = lw.binary("add", m, lw.unary("log", s))
    if not keep:
        out = lw.view(out, lw.g[lw.reduce("sum", x, dims, False)].shape)
    return out


def _clamp(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    lo, hi = op_arg(args, kwargs, 1, "min"), op_arg(args, kwargs, 2, "max")
    if isinstance(lo, torch.fx.Node) or isinstance(hi, torch.fx.Node):
        if lo is not None:
            x = lw.binary("maximum", x, lw.val(lo))
        if hi is not None:
            x = lw.binary("minimum", x, lw.val(hi))
        return x
    return lw.unary("clamp", x, min=None if lo is None else float(lo),
                    max=None if hi is None else float(hi))


def _elu_handler(lw: _Lowering, node, args, kwargs):
    return lw.unary("elu", lw.val(args[0]), alpha=float(op_arg(args, kwargs, 1, "alpha", 1.0)),
                    scale=float(op_arg(args, kwargs, 2, "scale", 1.0)),
                    input_scale=float(op_arg(args, kwargs, 3, "input_scale", 1.0)))


def _where(lw: _Lowering, node, args, kwargs):
    return lw.where(*(lw.val(v) for v in args[:3]))


def _to_copy(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    # aten.to.dtype(x, dtype, ...) passes it positionally, _to_copy by keyword
    dtype = kwargs.get("dtype", args[1] if len(args) > 1 and isinstance(args[1], torch.dtype)
                       else None)
    if dtype is None or dtype == torch.float32:
        return x if lw.g[x].dtype == "float32" else lw.unary("to_float", x)
    if dtype_name(dtype) in HALF_DTYPES:
        # a cast to half precision inside forward() (autocast's, or the user's): the value
        # rounded to that type, still held in a float register (`round_f16`, `round_bf16`)
        if lw.g[x].dtype != "float32":
            x = lw.unary("to_float", x)
        return lw.unary("round_f16" if dtype == torch.float16 else "round_bf16", x)
    raise UnsupportedError(f"unsupported dtype conversion to {dtype_name(dtype)}")


def _identity(lw: _Lowering, node, args, kwargs):
    return lw.val(args[0])


def _dropout(lw: _Lowering, node, args, kwargs):
    """aten.dropout(x, p, train) and its feature/alpha variants: the identity in eval mode or
    with p = 0; in training mode with p > 0 each call draws a random mask, which no kernel can
    be verified against."""
    p = float(op_arg(args, kwargs, 1, "p", 0.5))
    train = bool(op_arg(args, kwargs, 2, "train", True))
    if p == 0.0:
        return lw.val(args[0])
    if train:
        name = getattr(getattr(node.target, "overloadpacket", None), "__name__", "dropout")
        raise UnsupportedError(f"unsupported: {name} with p={p} in training mode is random; "
                               "call .eval() on it in the problem, or use p=0")
    lw.g.modes = lw.modes  # the identity only in eval mode
    return lw.val(args[0])


def _rrelu(lw: _Lowering, node, args, kwargs):
    """aten.rrelu(x, lower, upper, training): random slopes in training mode (refused), the
    mean slope (lower + upper) / 2 in eval mode."""
    lower = float(op_arg(args, kwargs, 1, "lower", 1.0 / 8.0))
    upper = float(op_arg(args, kwargs, 2, "upper", 1.0 / 3.0))
    if bool(op_arg(args, kwargs, 3, "training", False)) and lower != upper:
        raise UnsupportedError("unsupported: rrelu in training mode draws random slopes; call "
                               ".eval() on it in the problem")
    lw.g.modes = lw.modes
    return lw.unary("leaky_relu", lw.val(args[0]), negative_slope=(lower + upper) / 2.0)


def _inplace_add(lw: _Lowering, node, args, kwargs):
    """`buffer.add_(constant)`: BatchNorm counting the batches it saw in training mode
    (num_batches_tracked), recorded as an `Increment` of that buffer."""
    target = lw.buffer_target(args[0], "forward() updates a tensor")
    by = args[1] if len(args) > 1 else None
    if isinstance(by, bool) or not isinstance(by, (int, float)) or kwargs.get("alpha", 1) != 1:
        raise UnsupportedError(f"unsupported: forward() updates buffer {target} in place "
                               "other than by adding a constant")
    if node.users or any(u is not node for u in args[0].users):
        # the graph would read the value before the update where torch reads it after
        raise UnsupportedError(f"unsupported: forward() reads buffer {target} and also updates "
                               "it in place")
    lw.g.updates.append(Increment(target, by))
    return None


def _reshape(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    return lw.view(x, tuple(node.meta["val"].shape))


def _expand(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    shape = tuple(node.meta["val"].shape)
    return x if shape == lw.shape(x) else lw.g.add("identity", (x,), shape, lw.g[x].dtype)


def _rsub(lw: _Lowering, node, args, kwargs):
    a, b = lw.val(args[0]), lw.val(args[1])
    alpha = kwargs.get("alpha", 1)
    if alpha != 1:
        a = lw.binary("mul", a, lw.g.const(alpha))
    return lw.binary("sub", b, a)


def _div(lw: _Lowering, node, args, kwargs):
    mode = kwargs.get("rounding_mode")
    q = lw.binary("div", lw.val(args[0]), lw.val(args[1]))
    if mode is None:
        return q
    if mode == "floor":
        return lw.unary("floor", q)
    raise UnsupportedError(f"unsupported: div with rounding_mode={mode!r}")


def _pow(lw: _Lowering, node, args, kwargs):
    base, exp = args[0], args[1]
    if not isinstance(exp, torch.fx.Node):
        return lw.unary("pow_scalar", lw.val(base), exponent=float(exp))
    return lw.binary("pow", lw.val(base), lw.val(exp))


# -- losses ------------------------------------------------------------------------------------
# torch's reduction enum: 0 none, 1 mean, 2 sum

def _loss_reduce(lw: _Lowering, x: int, reduction: Any) -> int:
    reduction = {"none": 0, "mean": 1, "sum": 2}.get(reduction, reduction)
    if reduction == 0:
        return x
    if reduction == 2:
        return lw.reduce("sum", x, None, False)
    return lw.mean(x, None, False)


def _pointwise_loss(build: Callable[[_Lowering, int, int, list, dict], int],
                    reduction_pos: int = 2) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        a, b = lw.val(args[0]), lw.val(args[1])
        return _loss_reduce(lw, build(lw, a, b, args, kwargs),
                            op_arg(args, kwargs, reduction_pos, "reduction", 1))
    return handle


def _sq(lw: _Lowering, x: int) -> int:
    return lw.binary("mul", x, x)


def _smooth_l1(lw: _Lowering, a: int, b: int, args: list, kwargs: dict) -> int:
    beta = float(op_arg(args, kwargs, 3, "beta", 1.0))
    d = lw.unary("abs", lw.binary("sub", a, b))
    if beta == 0.0:
        return d
    quad = lw.binary("mul", _sq(lw, d), lw.g.const(0.5 / beta))
    lin = lw.binary("sub", d, lw.g.const(0.5 * beta))
    return lw.where(lw.binary("lt", d, lw.g.const(beta)), quad, lin)


def _huber(lw: _Lowering, a: int, b: int, args: list, kwargs: dict) -> int:
    delta = float(op_arg(args, kwargs, 3, "delta", 1.0))
    d = lw.unary("abs", lw.binary("sub", a, b))
    quad = lw.binary("mul", _sq(lw, d), lw.g.const(0.5))
    lin = lw.binary("mul", lw.binary("sub", d, lw.g.const(0.5 * delta)), lw.g.const(delta))
    return lw.where(lw.binary("lt", d, lw.g.const(delta)), quad, lin)


def _kl_div(lw: _Lowering, x: int, t: int, args: list, kwargs: dict) -> int:
    if bool(op_arg(args, kwargs, 3, "log_target", False)):
        return lw.binary("mul", lw.unary("exp", t), lw.binary("sub", t, x))
    # xlogy(t, t) - t * x, with 0 * log 0 = 0
    tlogt = lw.where(lw.binary("gt", t, lw.g.const(0.0)),
                              lw.binary("mul", t, lw.unary("log", t)), lw.g.const(0.0))
    return lw.binary("sub", tlogt, lw.binary("mul", t, x))


def _hinge_embedding(lw: _Lowering, x: int, t: int, args: list, kwargs: dict) -> int:
    margin = float(op_arg(args, kwargs, 2, "margin", 1.0))
    zero = lw.g.const(0.0)
    hinge = lw.unary("clamp", lw.binary("sub", lw.g.const(margin), x), min=0.0, max=None)
    out_margin = lw.where(lw.binary("ne", t, lw.g.const(1.0)), hinge, zero)
    out_self = lw.where(lw.binary("ne", t, lw.g.const(-1.0)), x, zero)
    return lw.binary("add", out_margin, out_self)


def _soft_margin(lw: _Lowering, x: int, t: int, args: list, kwargs: dict) -> int:
    return lw.unary("log1p", lw.unary("exp", lw.unary("neg", lw.binary("mul", t, x))))


def _bce(lw: _Lowering, x: int, t: int, args: list, kwargs: dict) -> int:
    if op_arg(args, kwargs, 2, "weight") is not None:
        raise UnsupportedError("unsupported: binary_cross_entropy with a weight")
    # torch clamps each log at -100
    log_x = lw.unary("clamp", lw.unary("log", x), min=-100.0, max=None)
    log_1mx = lw.unary("clamp", lw.unary("log", lw.binary("sub", lw.g.const(1.0), x)),
                       min=-100.0, max=None)
    pos = lw.binary("mul", t, log_x)
    neg = lw.binary("mul", lw.binary("sub", lw.g.const(1.0), t), log_1mx)
    return lw.unary("neg", lw.binary("add", pos, neg))


def _bce_handler(lw: _Lowering, node, args, kwargs):
    x, t = lw.val(args[0]), lw.val(args[1])
    for v in (x, t):  # torch rejects probabilities and targets outside [0, 1]: draw cases there
        if lw.g[v].op == "input":
            k = lw.g[v].attr("index")
            lw.g.inputs[k] = dataclasses.replace(lw.g.inputs[k], value_range=(0.0, 1.0))
    return _loss_reduce(lw, _bce(lw, x, t, args, kwargs), op_arg(args, kwargs, 3, "reduction", 1))


def _hinge_handler(lw: _Lowering, node, args, kwargs):
    x, t = lw.val(args[0]), lw.val(args[1])
    return _loss_reduce(lw, _hinge_embedding(lw, x, t, args, kwargs),
                        op_arg(args, kwargs, 3, "reduction", 1))


def _cosine_similarity(lw: _Lowering, node, args, kwargs):
    a, b = lw.val(args[0]), lw.val(args[1])
    dim = op_arg(args, kwargs, 2, "dim", 1)
    eps = float(op_arg(args, kwargs, 3, "eps", 1e-8))
    dot = lw.reduce("sum", lw.binary("mul", a, b), dim, False)
    na = lw.reduce("sum", _sq(lw, a), dim, False)
    nb = lw.reduce("sum", _sq(lw, b), dim, False)
    denom = lw.unary("sqrt", lw.unary("clamp", lw.binary("mul", na, nb), min=eps * eps, max=None))
    return lw.binary("div", dot, denom)


def _triplet_margin(lw: _Lowering, node, args, kwargs):
    a, pos, neg = (lw.val(v) for v in args[:3])
    margin = float(op_arg(args, kwargs, 3, "margin", 1.0))
    p = float(op_arg(args, kwargs, 4, "p", 2.0))
    eps = float(op_arg(args, kwargs, 5, "eps", 1e-6))
    if bool(op_arg(args, kwargs, 6, "swap", False)):
        raise UnsupportedError("unsupported: triplet_margin_loss with swap=True")
    last = len(lw.shape(a)) - 1
    d_ap = _vector_norm(lw, lw.binary("add", lw.binary("sub", a, pos), lw.g.const(eps)), p,
                        last, False)
    d_an = _vector_norm(lw, lw.binary("add", lw.binary("sub", a, neg), lw.g.const(eps)), p,
                        last, False)
    loss = lw.unary("clamp", lw.binary("add", lw.binary("sub", d_ap, d_an), lw.g.const(margin)),
                    min=0.0, max=None)
    return _loss_reduce(lw, loss, op_arg(args, kwargs, 7, "reduction", 1))


# -- matrix products ---------------------------------------------------------------------------

def _permute_node(lw: _Lowering, x: int, perm: tuple[int, ...]) -> int:
    shape = lw.shape(x)
    perm = tuple(p % len(shape) for p in perm) if shape else ()
    if perm == tuple(range(len(shape))):
        return x
    new_shape = tuple(shape[p] for p in perm)
    # moving only size-1 dims keeps the element order: a reshape, which every plan reads
    if [p for p in perm if shape[p] != 1] == sorted(p for p in perm if shape[p] != 1):
        return lw.view(x, new_shape)
    return lw.g.add("permute", (x,), new_shape, lw.g[x].dtype, perm=perm)


def _transpose(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    rank = len(lw.shape(x))
    if rank < 2:
        return x
    d0 = op_arg(args, kwargs, 1, "dim0", 0) % rank
    d1 = op_arg(args, kwargs, 2, "dim1", 1) % rank
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute_node(lw, x, tuple(perm))


def _t(lw: _Lowering, node, args, kwargs):
    x = lw.val(args[0])
    rank = len(lw.shape(x))
    return x if rank < 2 else _permute_node(lw, x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _matmul(lw: _Lowering, a: int, b: int) -> int:
    """torch.matmul semantics. Products with a vector side (M or N of 1) are bandwidth-bound
    row or column reductions and are lowered as such; diagonal matrices are scalings."""
    g = lw.g
    if g[a].op == "diag":  # diag(v) @ B scales the rows of B
        v = g[a].args[0]
        return lw.binary("mul", lw.view(v, (lw.shape(v)[0], 1)), b)
    if g[b].op == "diag":  # A @ diag(v) scales the columns of A
        return lw.binary("mul", a, g[b].args[0])
    attention = fold_manual(lw, a, b)  # softmax(q @ k^T * scale) @ v
    if attention is not None:
        return attention
    sa, sb = lw.shape(a), lw.shape(b)
    if not sa or not sb:
        raise UnsupportedError("matmul of a 0-d tensor")
    if len(sa) == 1:
        a = lw.view(a, (1, sa[0]))
    if len(sb) == 1:
        b = lw.view(b, (sb[0], 1))
    M, K = lw.shape(a)[-2:]
    K2, N = lw.shape(b)[-2:]
    if K != K2:
        raise ProblemError(f"matmul of {sa} and {sb}: inner sizes differ")
    try:
        batch = broadcast_shapes(lw.shape(a)[:-2], lw.shape(b)[:-2])
    except ValueError:
        raise ProblemError(f"matmul of {sa} and {sb}: batch dims do not broadcast") from None
    if N == 1:
        bt = lw.view(b, lw.shape(b)[:-2] + (1, K))
        out = lw.reduce("sum", lw.binary("mul", a, bt), -1, True)
    elif M == 1:
        at = lw.view(a, lw.shape(a)[:-2] + (K, 1))
        out = lw.reduce("sum", lw.binary("mul", at, b), -2, True)
    else:
        out = g.add("matmul", (a, b), batch + (M, N), "float32")
    final = batch + ((M,) if len(sa) > 1 else ()) + ((N,) if len(sb) > 1 else ())
    return lw.view(out, final)


def _linear(lw: _Lowering, node, args, kwargs):
    x, w = lw.val(args[0]), lw.val(args[1])
    bias = op_arg(args, kwargs, 2, "bias")
    y = _matmul(lw, x, _permute_node(lw, w, (1, 0)) if len(lw.shape(w)) == 2 else w)
    return y if bias is None else lw.binary("add", y, lw.val(bias))


def _addmm(lw: _Lowering, node, args, kwargs):
    c, a, b = (lw.val(v) for v in args[:3])
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    prod = _matmul(lw, a, b)
    if alpha != 1:
        prod = lw.binary("mul", prod, lw.g.const(alpha))
    if beta == 0:
        return prod
    if beta != 1:
        c = lw.binary("mul", c, lw.g.const(beta))
    return lw.binary("add", c, prod)


def _tri(upper: bool) -> Callable:
    def handle(lw: _Lowering, node, args, kwargs):
        x = lw.val(args[0])
        shape = lw.shape(x)
        if len(shape) < 2:
            raise ProblemError(f"{'triu' if upper else 'tril'} of a tensor of rank < 2")
        diagonal = int(op_arg(args, kwargs, 1, "diagonal", 0))
        mask = lw.g.add("tri_mask", (), shape[-2:], "bool", upper=upper, diagonal=diagonal)
        return lw.where(mask, x, lw.g.const(0.0))
    return handle


def _diag(lw: _Lowering, node, args, kwargs):
    v = lw.val(args[0])
    if len(lw.shape(v)) != 1 or op_arg(args, kwargs, 1, "diagonal", 0) != 0:
        raise UnsupportedError("unsupported: diag other than a diagonal matrix from a vector")
    n = lw.shape(v)[0]
    return lw.g.add("diag", (v,), (n, n), "float32")


def _einsum(lw: _Lowering, node, args, kwargs):
    """torch.einsum as torch itself computes it: its decomposition (permutes, views and one
    bmm, traced on meta tensors by make_fx) lowered op by op, so an einsum plans as the
    matrix product it is."""
    from torch.fx.experimental.proxy_tensor import make_fx

    equation, operands = args[0], list(args[1])
    metas = [o.meta["val"] for o in operands]
    if any(m.dtype != torch.float32 for m in metas):
        raise UnsupportedError("unsupported: einsum of tensors other than float32")
    sub = make_fx(lambda *t: torch.einsum(equation, *t))(
        *[torch.empty(m.shape, dtype=m.dtype, device="meta") for m in metas])
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for n in sub.graph.nodes:  # names of their own: the outer graph's may coincide
        n.name = f"{node.name}__{n.name}"
    for n, outer in zip(placeholders, operands):
        lw.env[n.name] = lw.val(outer)
    out = None
    for n in sub.graph.nodes:
        if n.op == "call_function":
            lw.env[n.name] = lw.lower_call(n)
        elif n.op == "output":
            out = lw.val(n.args[0][0] if isinstance(n.args[0], (list, tuple)) else n.args[0])
    assert out is not None, "the subgraph has no output"
    return _as_one_reshape(lw, out)


def _as_one_reshape(lw: _Lowering, x: int) -> int:
    """`x` as one reshape of the value below its chain of views and permutes, where the
    permutes move only dims of size 1 (einsum's decomposition ends a product with
    view -> permute -> view that keep its element order). Where that value is a product and
    the reshape only splits its batch dim, the product is taken over the split batch dims
    instead (its operands reshaped, read in place), so that an epilogue or a softmax after
    it sees no reshape at all."""
    base = x
    while lw.g[base].op in ("view", "permute"):
        n = lw.g[base]
        if n.op == "permute":
            src = lw.shape(n.args[0])
            moved = [p for p in n.attr("perm") if src[p] != 1]
            if moved != sorted(moved):
                return x
        base = n.args[0]
    if base == x:
        return x
    shape, product = lw.shape(x), lw.g[base]
    if product.op == "matmul" and shape[-2:] == product.shape[-2:]:
        batch = shape[:-2]
        lifted = [lw.view(v, batch + lw.shape(v)[-2:]) for v in product.args
                  if math.prod(lw.shape(v)[:-2]) == math.prod(batch)]
        if len(lifted) == 2:
            return _matmul(lw, *lifted)
    return lw.view(base, shape)


def _broadcast_tensors(lw: _Lowering, node, args, kwargs):
    vals = [lw.val(v) for v in args[0]]
    try:
        shape = broadcast_shapes(*(lw.shape(v) for v in vals))
    except ValueError:
        raise UnsupportedError("broadcast_tensors(): shapes do not broadcast") from None
    return tuple(v if lw.shape(v) == shape else lw.g.add("identity", (v,), shape, lw.g[v].dtype)
                 for v in vals)


_HANDLERS: dict[str, Callable] = {
    # elementwise, one argument
    **{name: _unary_handler(name) for name in (
        "relu", "silu", "sigmoid", "tanh", "hardsigmoid", "hardswish", "mish", "abs", "neg",
        "exp", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
        "erf", "sign", "floor", "ceil", "round", "logical_not")},
    "gelu": lambda lw, n, a, k: lw.unary(
        "gelu_tanh" if k.get("approximate", a[1] if len(a) > 1 else "none") == "tanh" else "gelu",
        lw.val(a[0])),
    "softplus": lambda lw, n, a, k: lw.unary(
        "softplus", lw.val(a[0]), beta=float(op_arg(a, k, 1, "beta", 1.0)),
        threshold=float(op_arg(a, k, 2, "threshold", 20.0))),
    "log_sigmoid_forward": lambda lw, n, a, k: (_log_sigmoid(lw, lw.val(a[0])), None),
    "log_sigmoid": lambda lw, n, a, k: _log_sigmoid(lw, lw.val(a[0])),
    "elu": _elu_handler,
    "selu": _unary_handler("elu", alpha=1.6732632423543772, scale=1.0507009873554805),
    "celu": lambda lw, n, a, k: lw.unary(
        "elu", lw.val(a[0]), alpha=float(op_arg(a, k, 1, "alpha", 1.0)),
        input_scale=1.0 / float(op_arg(a, k, 1, "alpha", 1.0))),
    "hardtanh": lambda lw, n, a, k: lw.unary(
        "hardtanh", lw.val(a[0]), min_val=float(op_arg(a, k, 1, "min_val", -1.0)),
        max_val=float(op_arg(a, k, 2, "max_val", 1.0))),
    "relu6": _unary_handler("hardtanh", min_val=0.0, max_val=6.0),
    "leaky_relu": lambda lw, n, a, k: lw.unary(
        "leaky_relu", lw.val(a[0]), negative_slope=float(op_arg(a, k, 1, "negative_slope", 0.01))),
    "square": lambda lw, n, a, k: lw.unary("pow_scalar", lw.val(a[0]), exponent=2.0),
    "pow": _pow,
    "clamp": _clamp, "clip": _clamp,
    "clamp_min": lambda lw, n, a, k: _clamp(lw, n, [a[0], a[1], None], {}),
    "clamp_max": lambda lw, n, a, k: _clamp(lw, n, [a[0], None, a[1]], {}),
    # elementwise, two or three arguments
    **{name: _binary_handler(name) for name in BINARY if name not in ("pow",)},
    "mul": _binary_handler("mul"),
    "div": _div, "true_divide": _div,
    "rsub": _rsub,
    "where": _where,
    # masked_fill(x, mask, value) = where(mask, value, x)
    "masked_fill": lambda lw, n, a, k: lw.where(lw.val(a[1]), lw.val(a[2]), lw.val(a[0])),
    # reductions
    "sum": _reduce_handler("sum"),
    "prod": _reduce_handler("prod"),
    "amax": _reduce_handler("max"),
    "amin": _reduce_handler("min"),
    "argmax": _reduce_handler("argmax"),
    "argmin": _reduce_handler("argmin"),
    "max": _max_dim("max", "argmax"),
    "min": _max_dim("min", "argmin"),
    "mean": lambda lw, n, a, k: lw.mean(lw.val(a[0]), op_arg(a, k, 1, "dim"),
                                        bool(op_arg(a, k, 2, "keepdim", False))),
    "var": _var_std(False),
    "var_mean": _var_mean,
    **{name: _bool_binary("logical_and") for name in ("__and__", "bitwise_and")},
    **{name: _bool_binary("logical_or") for name in ("__or__", "bitwise_or")},
    "std": _var_std(True),
    "logsumexp": _logsumexp,
    "linalg_vector_norm": _linalg_vector_norm,
    "norm": _norm,
    # composites
    "softmax": _softmax(False), "_softmax": _softmax(False),
    "log_softmax": _softmax(True), "_log_softmax": _softmax(True),
    "layer_norm": _layer_norm, "native_layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    # losses
    "mse_loss": _pointwise_loss(lambda lw, a, b, ar, kw: _sq(lw, lw.binary("sub", a, b))),
    "l1_loss": _pointwise_loss(lambda lw, a, b, ar, kw: lw.unary("abs", lw.binary("sub", a, b))),
    "smooth_l1_loss": _pointwise_loss(_smooth_l1),
    "huber_loss": _pointwise_loss(_huber),
    "kl_div": _pointwise_loss(_kl_div),
    "soft_margin_loss": _pointwise_loss(_soft_margin),
    "hinge_embedding_loss": _hinge_handler,
    "binary_cross_entropy": _bce_handler,
    "cosine_similarity": _cosine_similarity,
    "triplet_margin_loss": _triplet_margin,
    "broadcast_tensors": _broadcast_tensors,
    # matrix products and the layouts they read
    "mm": lambda lw, n, a, k: _matmul(lw, lw.val(a[0]), lw.val(a[1])),
    "bmm": lambda lw, n, a, k: _matmul(lw, lw.val(a[0]), lw.val(a[1])),
    "matmul": lambda lw, n, a, k: _matmul(lw, lw.val(a[0]), lw.val(a[1])),
    "einsum": _einsum,
    "linear": _linear,
    "addmm": _addmm, "baddbmm": _addmm,
    "t": _t, "numpy_T": _t, "mT": _t,
    "transpose": _transpose, "swapaxes": _transpose,
    "permute": lambda lw, n, a, k: _permute_node(lw, lw.val(a[0]), tuple(op_arg(a, k, 1, "dims"))),
    "triu": _tri(True), "tril": _tri(False),
    "diag": _diag,
    # layout no-ops and views
    "clone": _identity, "contiguous": _identity, "alias": _identity, "detach": _identity,
    "lift_fresh_copy": _identity,
    "dropout": _dropout, "feature_dropout": _dropout, "alpha_dropout": _dropout,
    "feature_alpha_dropout": _dropout,
    "rrelu": _rrelu,
    "add_": _inplace_add,
    "_to_copy": _to_copy, "to": _to_copy,
    # torch.export asserts metadata before dtype conversions; nothing to compute
    "_assert_tensor_metadata": lambda lw, n, a, k: None,
    "view": _reshape, "reshape": _reshape, "_unsafe_view": _reshape, "unsqueeze": _reshape,
    "expand_as": _expand,
    "squeeze": _reshape, "flatten": _reshape,
    "expand": _expand,
}
_HANDLERS["identity"] = _identity
# a number forward() made a tensor of (`NumbersAsScalarTensors`): the number
_HANDLERS["scalar_tensor"] = lambda lw, n, a, k: lw.g.const(float(a[0]))
_HANDLERS.update(_NORMSTAT_HANDLERS)  # instance, group and batch norm (normstat.py)
_HANDLERS.update(POOL_HANDLERS)  # max/avg pooling, 1-3 D (pool_capture.py)
_HANDLERS.update(CONV_HANDLERS)  # convolutions, transposed too, as implicit GEMMs (conv_capture.py)
_HANDLERS.update(SCAN_HANDLERS)  # cumsum/cumprod, reverse and exclusive (scan_capture.py)
_HANDLERS.update(_CLASS_LOSS_HANDLERS)  # cross_entropy, nll_loss (class_loss.py)
_HANDLERS.update(ATTENTION_HANDLERS)  # scaled dot-product attention (attention_capture.py)
UNARY.setdefault("identity", (lambda x, a, f: f"({x})", False))


def capture(model_cls: type, init_inputs: list, make_inputs: Callable[[], list],
            tracer: bool = True) -> Graph:
    """Trace `model_cls(*init_inputs)` on example inputs made by `make_inputs`, on meta tensors:
    with the capture's own tracer (`pretrace.py`) where it covers the module, else torch.export;
    `tracer=False`, torch.export alone (benchmarks/capture_equality.py compares the two)."""
    model, inputs = _instantiate(model_cls, init_inputs, make_inputs)
    # traced in the mode the user holds the module in (no .eval() here): a module's mode
    # decides what it computes (batch or running statistics, dropout or the identity)
    check_modes(model)
    graph = _pretraced(model, inputs) if tracer else None
    if graph is None:
        # a fresh module: forward() ran once already, and may have changed its state
        model, inputs = _instantiate(model_cls, init_inputs, make_inputs)
        graph = lower(_export(model, inputs), tuple(m.training for m in model.modules()))
    if graph.modes is None and _reads_mode(model):
        graph.modes = tuple(m.training for m in model.modules())  # forward() may branch on it
    return graph


def instantiate_on_meta(model_cls: type, init_inputs: list, make_inputs: Callable[[], list]
                        ) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The module and its forward() arguments on the meta device, every argument a tensor
    (of any dtype: a whole model's masks and indices are operands like any other)."""
    with torch.device("meta"):
        try:
            model = model_cls(*init_inputs)
        except Exception as exc:  # noqa: BLE001 - user code
            raise ProblemError(f"Model(*get_init_inputs()) raised {first_line(exc)}")
        try:
            inputs = make_inputs()
        except Exception as exc:  # noqa: BLE001 - user code
            raise ProblemError(f"get_inputs() raised {first_line(exc)}")
    inputs = list(inputs)
    for k, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise UnsupportedError(f"unsupported: forward() argument {k} is a "
                                   f"{type(t).__name__}; only tensor arguments are supported")
    return model, inputs


def _instantiate(model_cls: type, init_inputs: list, make_inputs: Callable[[], list]
                 ) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """The module and its forward() arguments on the meta device, the arguments' dtypes
    checked against what one capture takes."""
    model, inputs = instantiate_on_meta(model_cls, init_inputs, make_inputs)
    for k, t in enumerate(inputs):
        if dtype_name(t.dtype) not in STORAGE_FLOATS + (INDEX_DTYPE,):
            raise UnsupportedError(f"unsupported dtype {dtype_name(t.dtype)} for input {k}; "
                                   f"supported: {', '.join(STORAGE_FLOATS)}, and int64 class "
                                   "targets")
    return model, inputs


def tracer_covers(model_cls: type, init_inputs: list, make_inputs: Callable[[], list]
                  ) -> bool:
    """Whether the capture's own tracer covers this module (`capture` takes its graph), not
    leaving it to torch.export. A module that cannot be built raises as in `capture`."""
    model, inputs = _instantiate(model_cls, init_inputs, make_inputs)
    check_modes(model)
    return _pretraced(model, inputs) is not None


def _pretraced(model: torch.nn.Module, inputs: list[torch.Tensor]) -> Graph | None:
    """The graph as `pretrace.trace` records it (torch.export's, without torch.export's
    first-call import of Dynamo), or None where torch.export must trace: what the tracer
    leaves to it, and any error, which torch.export's run then reports as it always has."""
    try:
        from . import pretrace  # inside: it uses torch internals, a later torch may lack them

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = pretrace.trace(model, inputs)
        return lower(traced, tuple(m.training for m in model.modules()))
    except Exception:  # noqa: BLE001 - torch.export traces it again, and reports
        return None


class NumbersAsScalarTensors(torch.overrides.TorchFunctionMode):
    """`torch.tensor(number)` in forward() made as `torch.scalar_tensor(number)`: on the meta
    tensors of a capture the first loses its value (export lifts it as a constant input whose
    data is gone), the second is an op that holds the number as its argument, which the
    lowering takes as a constant (`min(y, torch.tensor(0.0))`, KernelBench level 2 #93)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is torch.tensor and len(args) == 1 and isinstance(args[0], (bool, int, float)) \
                and not kwargs.get("requires_grad"):
            number = args[0]
            dtype = kwargs.get("dtype") or (torch.bool if isinstance(number, bool) else
                                            torch.int64 if isinstance(number, int) else
                                            torch.get_default_dtype())
            return torch.scalar_tensor(number, dtype=dtype, device=kwargs.get("device"))
        return func(*args, **kwargs)


def _export(model: torch.nn.Module, inputs: list[torch.Tensor]
            ) -> "torch.export.ExportedProgram":
    try:
        with warnings.catch_warnings(), NumbersAsScalarTensors(), autocast.as_on_gpu():
            warnings.simplefilter("ignore")
            program = torch.export.export(model, tuple(inputs), strict=False)
    except (UnsupportedError, ProblemError):
        raise
    except Exception as exc:  # noqa: BLE001 - tracing failures are the user's to see
        # torch's words for a value-dependent forward() speak of its internals
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProblemError(data_dependent(exc)
                           or f"could not trace Model.forward with torch.export: {msg}")
    # CUDA autocast regions: their bodies inlined, the casts of torch's policy made explicit,
    # as `pretrace` gives them (autocast.py)
    autocast.inline(program)
    autocast.resolve(program.graph)
    return program


def _reads_mode(model: torch.nn.Module) -> bool:
    """Whether a module class of the problem's own (not torch's: their mode-dependent ops are
    told apart in the lowering) reads `self.training` in forward(): the trace followed one
    branch, so the emitted module must refuse another mode."""
    for m in model.modules():
        cls = type(m)
        if cls.__module__.startswith("torch."):
            continue
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            continue
        if re.search(r"\btraining\b", source):
            return True
    return False


def check_modes(model: torch.nn.Module) -> None:
    """Refuse, before tracing, what tracing cannot express: a BatchNorm in training mode with
    momentum=None reads its batch counter on the host (a cumulative average)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    for name, m in model.named_modules():
        if isinstance(m, _BatchNorm) and m.training and m.track_running_stats \
                and m.momentum is None:
            raise UnsupportedError(f"unsupported: {name or 'the model'} ({type(m).__name__}) "
                                   "with momentum=None in training mode (a cumulative average "
                                   "of the running statistics)")


def _counter(node: torch.fx.Node) -> bool:
    """An integer buffer forward() only adds constants to (num_batches_tracked)."""
    return all(u.op == "call_function" and getattr(getattr(u.target, "overloadpacket", None),
                                                   "__name__", None) == "add_"
               and u.args[0] is node for u in node.users)


def lower(exported: "torch.export.ExportedProgram | TracedProgram",
          modes: tuple[bool, ...] | None = None) -> Graph:
    """Lower an ExportedProgram (its graph and input specs; `pretrace` records the same) to the
    IR; `modes` are the traced module's train/eval flags."""
    from torch.export.graph_signature import InputKind

    lw = _Lowering(modes)
    specs = {s.arg.name: s for s in exported.graph_signature.input_specs}
    user_index = 0
    for node in exported.graph.nodes:
        if node.op == "placeholder":
            spec = specs[node.name]
            meta = node.meta["val"]
            dtype = dtype_name(meta.dtype)
            if spec.kind == InputKind.BUFFER:
                assert spec.target is not None, "export names every buffer"
                lw.buffers[node.name] = spec.target
            if spec.kind == InputKind.BUFFER and dtype not in STORAGE_FLOATS and _counter(node):
                # e.g. BatchNorm's num_batches_tracked: forward() only counts in it (`add_`)
                continue
            if spec.kind == InputKind.USER_INPUT:
                gin = GraphInput(node.name, "input", tuple(meta.shape), dtype, arg_index=user_index)
                user_index += 1
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                role = "parameter" if spec.kind == InputKind.PARAMETER else "buffer"
                gin = GraphInput(node.name, role, tuple(meta.shape), dtype, target=spec.target)
            elif spec.kind == InputKind.CONSTANT_TENSOR:  # data forward() holds: a list
                raise UnsupportedError(f"unsupported: a constant tensor of shape "
                                       f"{tuple(meta.shape)} made in forward() ({node.name}); "
                                       "numbers and torch.tensor(number) are supported")
            else:
                raise UnsupportedError(f"unsupported input kind {spec.kind.name} ({node.name})")
            # int64 forward() arguments may be class targets (`check_index_inputs`)
            if dtype not in STORAGE_FLOATS and not (gin.role == "input" and dtype == INDEX_DTYPE):
                raise UnsupportedError(f"unsupported dtype {dtype} for {gin.role} {node.name}; "
                                       f"supported: {', '.join(STORAGE_FLOATS)}")
            lw.env[node.name] = lw.g.add_input(gin)
        elif node.op == "call_function":
            lw.env[node.name] = lw.lower_call(node)
        elif node.op == "output":
            outs = node.args[0]
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if len(outs) != 1:
                raise UnsupportedError(f"unsupported: forward() returns {len(outs)} values; "
                                       "one output tensor is supported")
            if not isinstance(outs[0], torch.fx.Node):
                raise ProblemError("forward() must return a tensor")
            lw.g.output = lw.val(outs[0])
            meta = outs[0].meta.get("val")
            stored = dtype_name(meta.dtype) if isinstance(meta, torch.Tensor) else "float32"
            if stored in HALF_DTYPES and lw.g[lw.g.output].dtype == "float32":
                lw.g.out_dtype = stored  # computed in float32, rounded where it is stored
        elif node.op == "get_attr":
            raise UnsupportedError(f"unsupported: constant tensor attribute {node.target}")
    check_leftovers(lw.g)
    check_index_inputs(lw.g)
    out = lw.g[lw.g.output]
    if out.op in ("input", "const"):
        raise UnsupportedError("unsupported: forward() returns an input or a constant unchanged")
    if out.dtype not in ("float32", INDEX_DTYPE):
        raise UnsupportedError(f"unsupported output dtype {out.dtype}")
    return lw.g
