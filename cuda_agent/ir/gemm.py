"""The matrix-product planner: one `matmul` node, its operands read as strided views of inputs.

Capture lowers mm, bmm, matmul, linear, addmm and friends to a ``matmul`` node over operand
expressions built from inputs by views, transposes (``permute``) and broadcasts (``identity``
expands). Here each operand is resolved to (input, strides) so the template can read transposed
and broadcast operands in place, the batch dims are collapsed to one, and a batch that only
stacks rows of A over a shared B is folded into M (a 3-D tensor times a matrix is one big GEMM).
What follows the product (bias, activation, scaling, residual, triangular masks) is the fused
epilogue of `make_anchored_plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UnsupportedError
from .ops import cast_operand
from .graph import Graph
from .plan import KernelPlan, make_anchored_plan


@dataclass(frozen=True)
class StridedOperand:
    """An operand as a view of graph input `index`: shape and element strides (0: broadcast)."""

    index: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class GemmInfo:
    """C[b, m, n] = sum_k A[b, m, k] * B[b, k, n], every operand addressed by strides."""

    a: int  # graph input index of A
    b: int  # graph input index of B
    batch: int
    M: int
    N: int
    K: int
    a_strides: tuple[int, int, int]  # (batch, m, k)
    b_strides: tuple[int, int, int]  # (batch, k, n)
    rows_per_matrix: int  # rows of one output matrix (M, unless the batch was folded into M)
    # an output entirely fixed to zero outside a triangle: tiles there are written, not computed
    zero_outside: tuple[str, int] | None = None  # ("upper"|"lower", diagonal)
    # B read through a gather instead of strides: a convolution's im2col matrix (`ir/conv.py`)
    b_gather: Any = None
    # A's k split in two: (k // inner) * outer + (k % inner) * a_strides[2], as (inner, outer);
    # a transposed convolution's weight, whose K runs over channels of (C, OC/G, *kernel)
    a_k_split: tuple[int, int] | None = None


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[j + 1:]) for j in range(len(shape)))


def view_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                 new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides of a view of a strided tensor as `new_shape` without a copy, or None where
    none exists: torch's own rule (`computeStride` in ATen), dims merged or split only within
    runs that are contiguous among themselves (einsum's decomposition merges a permuted
    operand's batch dims and drops a size-1 dim this way)."""
    if math.prod(shape) != math.prod(new_shape) or not shape:
        return None
    out = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk = strides[-1]
    tensor_numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                out[view_d] = view_numel * chunk
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk = strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(out) if view_d == -1 else None


def strided_operand(graph: Graph, nid: int) -> StridedOperand:
    """Resolve a chain of views, transposes and expands down to an input, or raise."""
    n = graph[nid]
    if n.op == "input":
        return StridedOperand(n.attr("index"), n.shape, _contiguous(n.shape))
    if n.op in ("view", "permute", "identity"):
        src = strided_operand(graph, n.args[0])
        if n.op == "permute":
            perm = n.attr("perm")
            return StridedOperand(src.index, tuple(src.shape[p] for p in perm),
                                  tuple(src.strides[p] for p in perm))
        if n.op == "identity":  # expand: new leading dims and size-1 dims broadcast
            off = len(n.shape) - len(src.shape)
            strides = [0] * off + [0 if s == 1 and t != 1 else st for s, t, st in
                                   zip(src.shape, n.shape[off:], src.strides)]
            return StridedOperand(src.index, n.shape, tuple(strides))
        if src.strides == _contiguous(src.shape) or all(
                st == c for s, st, c in zip(src.shape, src.strides, _contiguous(src.shape))
                if s != 1):
            return StridedOperand(src.index, n.shape, _contiguous(n.shape))
        if [s for s in src.shape if s != 1] == [s for s in n.shape if s != 1]:
            kept = iter([st for s, st in zip(src.shape, src.strides) if s != 1])
            return StridedOperand(src.index, n.shape,
                                  tuple(0 if s == 1 else next(kept) for s in n.shape))
        viewed = view_strides(src.shape, src.strides, n.shape)
        if viewed is None:
            raise UnsupportedError(f"unsupported: reshape {src.shape} -> {n.shape} of a "
                                   "transposed matrix-product operand")
        return StridedOperand(src.index, n.shape, viewed)
    cast = cast_operand(n.op, "matrix product")  # torch.autocast's (ir/autocast.py)
    if cast:
        raise UnsupportedError(cast)
    raise UnsupportedError(f"unsupported: {n.op} on a matrix-product operand (only views, "
                           "transposes and broadcasts of inputs are read in place)")


def _batch_stride(op: StridedOperand, batch_shape: tuple[int, ...], what: str) -> int:
    """One stride for the operand's (right-aligned, broadcast) batch dims collapsed into one."""
    dims = op.shape[:-2]
    strides = op.strides[:-2]
    off = len(batch_shape) - len(dims)
    full = [0] * off + [0 if s == 1 else st for s, st in zip(dims, strides)]
    sizes = list(batch_shape)
    real = [(sz, st) for sz, st in zip(sizes, full) if sz != 1]
    if not real:
        return 0
    if all(st == 0 for _, st in real):
        return 0
    for (sz_o, st_o), (sz_i, st_i) in zip(real, real[1:]):
        if st_o != st_i * sz_i:
            raise UnsupportedError(f"unsupported: the batch dims of {what} cannot be read as "
                                   "one stride (a partly broadcast or permuted batch)")
    return real[-1][1]


def make_gemm_plan(graph: Graph) -> KernelPlan:
    mm = next(n for n in graph.live() if n.op == "matmul")
    A = strided_operand(graph, mm.args[0])
    B = strided_operand(graph, mm.args[1])
    if len(A.shape) < 2 or len(B.shape) < 2:
        raise UnsupportedError("unsupported: matrix-product operands of rank < 2 after capture")
    M, K = A.shape[-2:]
    K2, N = B.shape[-2:]
    if K != K2:
        raise UnsupportedError(f"matrix product of {A.shape} and {B.shape}: inner sizes differ")
    batch_shape = mm.shape[:-2]
    batch = math.prod(batch_shape)
    sab = _batch_stride(A, batch_shape, "A")
    sbb = _batch_stride(B, batch_shape, "B")
    sam, sak = A.strides[-2:]
    sbk, sbn = B.strides[-2:]
    rows = M
    # A stacked row-major over a batch that B does not have: one GEMM with batch*M rows
    if batch > 1 and sbb == 0 and sab == M * sam and sam != 0:
        M, batch, sab = M * batch, 1, 0
    zero = _zero_outside(graph)
    info = GemmInfo(A.index, B.index, batch, M, N, K, (sab, sam, sak), (sbb, sbk, sbn), rows,
                    zero)
    # the arithmetic floor counts only outputs a mask does not fix to zero
    kept = M * N if zero is None else (M // rows) * _kept_in_triangle(rows, N, *zero)
    plan = make_anchored_plan(graph, mm.id, "gemm", [A.index, B.index], info=info,
                              anchor_flops=2 * batch * kept * K)
    return plan


def _kept_in_triangle(rows: int, cols: int, side: str, d: int) -> int:
    """Elements (r, c) of a rows x cols matrix with c - r >= d (upper) or c - r <= d (lower)."""
    if side == "upper":
        return sum(max(0, cols - max(0, r + d)) for r in range(rows))
    return sum(min(cols, max(0, r + d + 1)) for r in range(rows))


def _zero_outside(graph: Graph) -> tuple[str, int] | None:
    """("upper"|"lower", diagonal) when the output is where(tri_mask, x, 0): torch.triu/tril."""
    out = graph[graph.output]
    while out.op == "view":
        out = graph[out.args[0]]
    if out.op != "where":
        return None
    cond, _, other = (graph[a] for a in out.args)
    if cond.op == "tri_mask" and other.op == "const" and other.attr("value") == 0.0:
        return ("upper" if cond.attr("upper") else "lower", int(cond.attr("diagonal")))
    return None
