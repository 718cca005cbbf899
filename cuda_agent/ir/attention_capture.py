"""Capture of scaled dot-product attention -> one ``attention`` node.

Two spellings reach the same node:

* ``F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale)``, which
  torch.export keeps as one aten op;
* the manual form ``softmax(q @ k^T * scale [+ mask], dim=-1) @ v`` (``/ c`` for ``* scale``,
  the scale may also sit on q). Capture has already expanded the softmax into max/sub/exp/sum/div
  and the products into ``matmul`` nodes when the second product arrives, so `fold_manual`
  recognises that expansion at the outer product. Planning it as two GEMMs would need the whole
  score matrix in memory (and two structured ops in one graph, which no planner takes).

An ``attention`` node has args (q, k, v) or (q, k, v, mask), q (..., L, E), k (..., S, E),
v (..., S, Ev), mask broadcastable to (..., L, S), and attrs ``scale`` (float), ``causal``
(keep key j <= query i, torch's top-left alignment) and ``masked``. Its shape is the broadcast
batch + (L, Ev). Operands stay views of inputs; the planner reads them through strides.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..errors import UnsupportedError
from .capture_common import op_arg
from .graph import Graph, broadcast_shapes


def _swap_last(g: Graph, x: int) -> int:
    """x with its last two dims swapped (a permute the planner reads as strides)."""
    shape = g[x].shape
    r = len(shape)
    perm = tuple(range(r - 2)) + (r - 1, r - 2)
    return g.add("permute", (x,), shape[:-2] + (shape[-1], shape[-2]), g[x].dtype, perm=perm)


def attention_node(g: Graph, q: int, k: int, v: int, mask: int | None, scale: float,
                   causal: bool) -> int:
    """Add an ``attention`` node after checking the operands' shapes."""
    sq, sk, sv = g[q].shape, g[k].shape, g[v].shape
    if min(len(sq), len(sk), len(sv)) < 2:
        raise UnsupportedError("unsupported: attention operands of rank < 2")
    if sq[-1] != sk[-1] or sk[-2] != sv[-2]:
        raise UnsupportedError(f"attention of q {sq}, k {sk}, v {sv}: sizes do not match")
    try:
        batch = broadcast_shapes(sq[:-2], sk[:-2], sv[:-2])
    except ValueError:
        raise UnsupportedError(f"attention of q {sq}, k {sk}, v {sv}: batch dims do not "
                               "broadcast") from None
    args: tuple[int, ...] = (q, k, v)
    if mask is not None:
        if g[mask].dtype != "float32":
            raise UnsupportedError(f"unsupported: a {g[mask].dtype} attention mask; only an "
                                   "additive float mask is supported")
        try:
            if broadcast_shapes(g[mask].shape, batch + (sq[-2], sk[-2])) != \
                    batch + (sq[-2], sk[-2]):
                raise ValueError
        except ValueError:
            raise UnsupportedError(f"attention mask {g[mask].shape} does not broadcast to the "
                                   f"scores {batch + (sq[-2], sk[-2])}") from None
        args += (mask,)
    return g.add("attention", args, batch + (sq[-2], sv[-1]), "float32", scale=float(scale),
                 causal=bool(causal), masked=mask is not None)


def _sdpa(lw: Any, node: torch.fx.Node, args: list, kwargs: dict) -> int:
    # scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
    #                              *, scale=None, enable_gqa=False)
    q, k, v = (lw.val(a) for a in args[:3])
    mask = op_arg(args, kwargs, 3, "attn_mask")
    dropout = float(op_arg(args, kwargs, 4, "dropout_p", 0.0))
    causal = bool(op_arg(args, kwargs, 5, "is_causal", False))
    scale = kwargs.get("scale", args[6] if len(args) > 6 else None)
    if dropout != 0.0:
        raise UnsupportedError(f"unsupported: attention with dropout_p={dropout} (random)")
    if kwargs.get("enable_gqa", args[7] if len(args) > 7 else False):
        raise UnsupportedError("unsupported: grouped-query attention (enable_gqa=True)")
    if scale is None:
        scale = 1.0 / math.sqrt(lw.shape(q)[-1])
    m = None if mask is None else lw.val(mask)
    return attention_node(lw.g, q, k, v, m, float(scale), causal)


def _const(g: Graph, nid: int) -> float | None:
    n = g[nid]
    return n.attr("value") if n.op == "const" else None


def _peel_scale(g: Graph, nid: int) -> tuple[int, float]:
    """(x, c) for a node computing x * c, c * x or x / c with a constant c, else (nid, 1)."""
    factor = 1.0
    while g[nid].op in ("mul", "div"):
        a, b = g[nid].args
        if g[nid].op == "mul" and (c := _const(g, b)) is not None:
            nid, factor = a, factor * c
        elif g[nid].op == "mul" and (c := _const(g, a)) is not None:
            nid, factor = b, factor * c
        elif g[nid].op == "div" and (c := _const(g, b)):
            nid, factor = a, factor / c
        else:
            break
    return nid, factor


def _reduce_last(g: Graph, nid: int, kind: str, body: int) -> bool:
    n = g[nid]
    rank = len(g[body].shape)
    return n.op == "reduce" and n.attr("kind") == kind and n.args == (body,) and \
        n.attr("dims") == (rank - 1,) and bool(n.attr("keepdim"))


def _softmax_input(g: Graph, p: int) -> int | None:
    """x when node p is capture's expansion of softmax(x, dim=-1): div(exp(x - max x), sum)."""
    n = g[p]
    if n.op != "div":
        return None
    e, s = n.args
    if g[e].op != "exp" or not _reduce_last(g, s, "sum", e):
        return None
    shifted = g[g[e].args[0]]
    if shifted.op != "sub":
        return None
    x, m = shifted.args
    return x if _reduce_last(g, m, "max", x) else None


def fold_manual(lw: Any, a: int, b: int) -> int | None:
    """An ``attention`` node when `a @ b` is softmax(scores, -1) @ v with scores a scaled
    (and optionally masked) q @ k^T; None for any other product."""
    g = lw.g
    x = _softmax_input(g, a)
    if x is None:
        return None
    mask = None
    if g[x].op == "add":  # an additive mask on either side
        for mm_side, mask_side in (g[x].args, tuple(reversed(g[x].args))):
            if g[_peel_scale(g, mm_side)[0]].op == "matmul":
                x, mask = mm_side, mask_side
                break
    mm, scale = _peel_scale(g, x)
    if g[mm].op != "matmul" or g[mm].shape != g[x].shape:
        return None
    q, scale_q = _peel_scale(g, g[mm].args[0])
    kt, scale_k = _peel_scale(g, g[mm].args[1])
    if len(g[b].shape) < 2 or g[b].shape[-2] != g[kt].shape[-1]:
        return None
    return attention_node(g, q, _swap_last(g, kt), b, mask, scale * scale_q * scale_k,
                          causal=False)


ATTENTION_HANDLERS = {"scaled_dot_product_attention": _sdpa}
