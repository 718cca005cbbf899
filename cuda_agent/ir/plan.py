"""Partition: decide how a captured graph maps onto one kernel pattern.

Every value of the graph is related to one *iteration space* F (the shape of the reductions'
bodies, or of the output when nothing is reduced) by an `fmap`: for each of the value's own dims,
the F dim it runs along (None where the value is broadcast). With the reduced dims D a contiguous
run of F, F is viewed as (O, R, I) = (dims before D, D, dims after D), and values split into

* ``full`` values, which vary along D (computed per element of a row), and
* ``row`` values, which do not (reduction results and what is derived from them, once per row).

Reductions are grouped into *levels*: a level-2 reduction reads a level-1 result (softmax's sum
reads its max), so each level is one more pass over the row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import UnsupportedError
from .graph import INDEX_DTYPE, Graph, Node
from .ops import is_elementwise, uses_transcendental

FMap = tuple  # tuple[int | None, ...]


@dataclass
class KernelPlan:
    """What the templates need to know about one problem's computation."""

    graph: Graph
    kind: str  # "map" | "reduce"
    full_shape: tuple[int, ...]
    reduce_dims: tuple[int, ...]
    output: int  # node computed by the kernel (before `out_shape`'s reshape)
    out_shape: tuple[int, ...]  # torch shape of the forward() result
    out_dtype: str
    fmaps: dict[int, FMap] = field(default_factory=dict)
    classes: dict[int, str] = field(default_factory=dict)  # node -> "full" | "row" | "const"
    levels: list[list[int]] = field(default_factory=list)  # reduce node ids per level
    operands: list[int] = field(default_factory=list)  # graph input indices read, kernel order
    operand_shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)  # as the kernel sees
    memo: dict = field(default_factory=dict, repr=False)  # derived facts, computed once

    def cached(self, key: object, fn):  # noqa: ANN001 - tiny memo helper for templates
        if key not in self.memo:
            self.memo[key] = fn()
        return self.memo[key]

    # -- the (O, R, I) view -------------------------------------------------------------------
    @property
    def O(self) -> int:  # noqa: N802 - the standard names of this view
        return math.prod(self.full_shape[: self.reduce_dims[0]]) if self.reduce_dims else 1

    @property
    def R(self) -> int:  # noqa: N802
        return math.prod(self.full_shape[d] for d in self.reduce_dims) if self.reduce_dims else 1

    @property
    def I(self) -> int:  # noqa: N802, E743
        return math.prod(self.full_shape[self.reduce_dims[-1] + 1:]) if self.reduce_dims else 1

    @property
    def numel(self) -> int:
        return math.prod(self.full_shape)

    @property
    def output_is_row(self) -> bool:
        return self.classes.get(self.output) == "row"

    @property
    def family(self) -> str:
        """Coarse op family, used for reports and for the space's templates."""
        if self.kind == "map":
            return "elementwise"
        kinds = {self.graph[n].attr("kind") for lv in self.levels for n in lv}
        if self.output_is_row:
            return "reduction"
        if len(self.levels) >= 2 and "max" in kinds:
            return "softmax"
        return "norm"

    def node(self, nid: int) -> Node:
        return self.graph[nid]

    def full_nodes(self) -> list[Node]:
        return [n for n in self.graph.live() if self.classes.get(n.id) == "full"]

    def uses_transcendental(self) -> bool:
        return any(uses_transcendental(n.op) for n in self.graph.live())

    def is_index_output(self) -> bool:
        return self.out_dtype == INDEX_DTYPE

    def bytes_moved(self) -> int:
        """Fewest bytes any kernel must move: each operand read once, the output written once."""
        total = 0
        for k in self.operands:
            total += math.prod(self.operand_shapes[k]) * 4
        out_elems = math.prod(self.out_shape) if self.out_shape else 1
        return total + out_elems * (8 if self.out_dtype == INDEX_DTYPE else 4)

    def flops(self) -> int:
        """Arithmetic per the IR (one per elementwise op and per reduction step), a floor."""
        count = 0
        for n in self.graph.live():
            if is_elementwise(n.op) or n.op == "reduce":
                count += self.numel if self.classes.get(n.id) == "full" or n.op == "reduce" \
                    else self.O * self.I
        return count


def _right_aligned(shape: tuple[int, ...], rank: int) -> FMap:
    off = rank - len(shape)
    return tuple(None if s == 1 else k + off for k, s in enumerate(shape))


def _merge(node: Node, parts: list[tuple[tuple[int, ...], FMap]]) -> FMap:
    """fmap of an elementwise node from its operands' shapes and fmaps (torch broadcasting)."""
    rank = len(node.shape)
    out: list = [None] * rank
    for shape, fmap in parts:
        off = rank - len(shape)
        for j, size in enumerate(shape):
            if size == 1:
                continue
            f = fmap[j]
            if out[j + off] is None:
                out[j + off] = f
            elif out[j + off] != f:
                raise UnsupportedError(
                    "unsupported: a reduced value is broadcast along a different dimension "
                    "than it was reduced over (cross-row access); fusion of this pattern is "
                    "not supported")
    return tuple(out)


def _view_fmap(src_shape: tuple[int, ...], src_fmap: FMap, shape: tuple[int, ...]) -> FMap | None:
    """fmap through a view that only inserts or removes size-1 dims; None for other views."""
    if [s for s in src_shape if s != 1] != [s for s in shape if s != 1]:
        return None
    carried = iter([f for s, f in zip(src_shape, src_fmap) if s != 1])
    return tuple(None if s == 1 else next(carried) for s in shape)


def make_plan(graph: Graph) -> KernelPlan:
    """Classify the graph into one kernel pattern, or raise `UnsupportedError` saying why."""
    out_node = graph[graph.output]
    out_shape = out_node.shape
    kernel_out = graph.output
    # A final reshape of the result is metadata only: compute the source, view it at the end.
    while graph[kernel_out].op == "view":
        kernel_out = graph[kernel_out].args[0]
    live = [n for n in graph.live() if n.id <= kernel_out or n.id == kernel_out]
    keep = {kernel_out}
    for n in reversed(live):
        if n.id in keep:
            keep.update(n.args)
    live = [n for n in live if n.id in keep]
    reduces = [n for n in live if n.op == "reduce"]

    if reduces:
        body_shapes = {graph[r.args[0]].shape for r in reduces}
        dims = {r.attr("dims") for r in reduces}
        if len(body_shapes) > 1 or len(dims) > 1:
            raise UnsupportedError(
                "unsupported: reductions over different shapes or dimensions in one problem "
                f"(shapes {sorted(body_shapes)}, dims {sorted(dims)}); multi-kernel "
                "partitioning is not supported yet")
        full_shape = body_shapes.pop()
        reduce_dims = dims.pop()
        if list(reduce_dims) != list(range(reduce_dims[0], reduce_dims[-1] + 1)):
            raise UnsupportedError(f"unsupported: reduction over non-adjacent dims {reduce_dims}")
        kind = "reduce"
    else:
        full_shape = graph[kernel_out].shape
        reduce_dims = ()
        kind = "map"
    rank = len(full_shape)
    plan = KernelPlan(graph, kind, full_shape, reduce_dims, kernel_out, out_shape,
                      out_node.dtype)

    # fmaps, classes and levels in one topological sweep
    level_of: dict[int, int] = {}
    for n in live:
        if n.op == "input":
            fm = _right_aligned(n.shape, rank)
            if len(n.shape) > rank or any(
                    f is not None and full_shape[f] != s for f, s in zip(fm, n.shape)):
                fm = None  # only usable through a reshape (checked where it is used)
        elif n.op == "const":
            fm = ()
        elif n.op == "reduce":
            body = n.args[0]
            if plan.classes[body] != "full":
                raise UnsupportedError("unsupported: reduction of a value that does not vary "
                                       "along the reduced dims")
            if n.attr("keepdim"):
                fm = tuple(None if k in reduce_dims else k for k in range(rank))
            else:
                fm = tuple(k for k in range(rank) if k not in reduce_dims)
            fm = tuple(None if s == 1 else f for f, s in zip(fm, n.shape))
            level_of[n.id] = 1 + max((level_of.get(a, 0) for a in _ancestors(graph, body)),
                                     default=0)
        elif n.op == "view":
            src = graph[n.args[0]]
            src_fm = plan.fmaps[src.id]
            fm = None if src_fm is None else _view_fmap(src.shape, src_fm, n.shape)
            if fm is None:
                if src.op == "input":  # a reshaped input is just another view of its memory
                    fm = _right_aligned(n.shape, rank)
                    plan.operand_shapes[src.attr("index")] = n.shape
                else:
                    raise UnsupportedError(f"unsupported: reshape {src.shape} -> {n.shape} "
                                           "in the middle of the computation")
        elif is_elementwise(n.op):
            for a in n.args:
                if plan.fmaps[a] is None:
                    raise UnsupportedError(f"unsupported: input of shape {graph[a].shape} does "
                                           f"not broadcast to {full_shape}")
            fm = _merge(n, [(graph[a].shape, plan.fmaps[a]) for a in n.args])
        else:
            raise UnsupportedError(f"unsupported IR op {n.op}")
        plan.fmaps[n.id] = fm
        if fm is None:
            continue
        if n.op == "const":
            plan.classes[n.id] = "const"
        elif any(f in reduce_dims for f in fm if f is not None) or (kind == "map"):
            plan.classes[n.id] = "full"
        else:
            plan.classes[n.id] = "row"
        if n.op == "reduce":
            plan.classes[n.id] = "row"

    if reduces:
        depth = max(level_of.values())
        plan.levels = [[r for r in level_of if level_of[r] == lv] for lv in range(1, depth + 1)]
    out_fm = plan.fmaps[kernel_out]
    if kind == "map" or plan.classes[kernel_out] == "full":
        if out_fm != tuple(range(rank)):
            raise UnsupportedError("unsupported: the output does not cover the iteration space "
                                   f"{full_shape} (it is broadcast in some dims)")
    else:
        want = tuple(k for k in range(rank) if k not in reduce_dims and full_shape[k] != 1)
        out_shape_k = graph[kernel_out].shape
        if tuple(f for f in out_fm if f is not None) != want or any(
                f is None and size != 1 for f, size in zip(out_fm, out_shape_k)):
            raise UnsupportedError("unsupported: output layout of the reduction (a reduced "
                                   "value broadcast back to a larger output)")

    used = sorted({n.attr("index") for n in live if n.op == "input"})
    plan.operands = used
    for k in used:
        plan.operand_shapes.setdefault(k, graph.inputs[k].shape)
    if graph[kernel_out].op in ("input", "const"):
        raise UnsupportedError("unsupported: the output is an input or a constant")
    return plan


def _ancestors(graph: Graph, nid: int) -> set[int]:
    seen, stack = set(), [nid]
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        stack.extend(graph[k].args)
    return seen
