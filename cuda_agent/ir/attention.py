"""The attention planner: one ``attention`` node, its operands read as strided views of inputs.

q, k, v (and an additive mask) are resolved to (input, strides) as the matrix-product planner
does, with one stride per batch dim (0 where an operand is broadcast), so transposed, expanded
or head-split layouts are read in place. What follows the attention output (a residual, a
scaling, an activation) is the fused epilogue of `make_anchored_plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from .gemm import strided_operand
from .graph import Graph
from .plan import KernelPlan, make_anchored_plan

MAX_HEAD_DIM = 128  # the template keeps a row's slice of the output in registers


@dataclass(frozen=True)
class AttnOperand:
    """A matrix operand as a view of graph input `index`: element strides per batch dim of the
    output's batch shape, then along its rows and its columns."""

    index: int
    batch_strides: tuple[int, ...]
    row_stride: int
    col_stride: int


@dataclass(frozen=True)
class AttentionInfo:
    """out[b, i, :] = sum_j softmax_j(scale * q[b, i] . k[b, j] + mask[b, i, j]) v[b, j, :],
    keys j > i dropped when causal."""

    q: AttnOperand
    k: AttnOperand
    v: AttnOperand
    mask: AttnOperand | None
    batch_shape: tuple[int, ...]
    Sq: int
    Sk: int
    D: int  # head dim of q and k
    DV: int  # head dim of v and of the output
    scale: float
    causal: bool

    @property
    def batch(self) -> int:
        return math.prod(self.batch_shape)

    def kept_pairs(self) -> int:
        """(query, key) pairs of one batch entry that the softmax sees."""
        if not self.causal:
            return self.Sq * self.Sk
        return sum(min(self.Sk, i + 1) for i in range(self.Sq))


def _operand(graph: Graph, nid: int, shape: tuple[int, ...], what: str) -> AttnOperand:
    """The operand read as a tensor of `shape` (batch + matrix): torch broadcasting, so a dim
    it lacks or has of size 1 gets stride 0 (a mask (S_k,) is read for every batch and row)."""
    try:
        op = strided_operand(graph, nid)
    except UnsupportedError:
        raise UnsupportedError(f"unsupported: a computed attention {what} (op "
                               f"{graph[nid].op}); only views of inputs are read") from None
    off = len(shape) - len(op.shape)
    strides = [0] * off + [0 if s == 1 else st for s, st in zip(op.shape, op.strides)]
    return AttnOperand(op.index, tuple(strides[:-2]), strides[-2], strides[-1])


def attention_info(graph: Graph, nid: int) -> AttentionInfo:
    node = graph[nid]
    batch_shape = node.shape[:-2]
    q, k, v = node.args[:3]
    Sq, D = graph[q].shape[-2:]
    Sk, DV = graph[v].shape[-2:]
    if max(D, DV) > MAX_HEAD_DIM:
        raise UnsupportedError(f"unsupported: attention head dim {max(D, DV)} (at most "
                               f"{MAX_HEAD_DIM})")
    if min(Sq, Sk, D, DV) < 1:
        raise UnsupportedError("unsupported: empty attention")
    mask = _operand(graph, node.args[3], batch_shape + (Sq, Sk), "mask") \
        if node.attr("masked") else None
    return AttentionInfo(_operand(graph, q, batch_shape + (Sq, D), "query"),
                         _operand(graph, k, batch_shape + (Sk, D), "key"),
                         _operand(graph, v, batch_shape + (Sk, DV), "value"), mask, batch_shape,
                         Sq, Sk, D, DV, float(node.attr("scale")), bool(node.attr("causal")))


def make_attention_plan(graph: Graph) -> KernelPlan:
    """Plan a graph whose output is an attention followed by an elementwise epilogue."""
    node = next(n for n in graph.live() if n.op == "attention")
    info = attention_info(graph, node.id)
    reads = [info.q.index, info.k.index, info.v.index] + \
        ([info.mask.index] if info.mask else [])
    # the two products over the (query, key) pairs the softmax keeps: 2*D + 2*DV per pair
    flops = 2 * info.batch * info.kept_pairs() * (info.D + info.DV)
    return make_anchored_plan(graph, node.id, "attention", sorted(set(reads)), info=info,
                              anchor_flops=flops)
