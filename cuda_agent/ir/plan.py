"""Partition: decide how a captured graph maps onto one kernel pattern.

Every value of the graph is related to one *iteration space* F (the shape of the reductions'
bodies, or of the output when nothing is reduced) by an `fmap`: for each of the value's own dims,
the F dim it runs along (None where the value is broadcast). With the reduced dims D a contiguous
run of F, F is viewed as (O, R, I) = (dims before D, D, dims after D), and values split into

* ``full`` values, which vary along D (computed per element of a row), and
* ``row`` values, which do not (reduction results and what is derived from them, once per row).

Reductions are grouped into *levels*: a level-2 reduction reads a level-1 result (softmax's sum
reads its max), so each level is one more pass over the row.

A loss folds a per-row value over all rows (cross-entropy: the mean over rows of a row's
log-sum-exp minus its target's logit). Such *outer* reductions (`KernelPlan.outer`) reduce a
``row`` value to one number; they and what derives from them are ``total`` values, computed once
per kernel after every row has contributed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import UnsupportedError
from .graph import INDEX_DTYPE, Graph, Node, element_bytes
from .ops import is_elementwise, render, uses_transcendental

FMap = tuple[int | None, ...]
# Plan kind of a reduction over a leading and a trailing run of dims around a kept middle run
# (batch statistics: (N, S) around C). O/R/I read as (kept, reduced, 1); only templates written
# for it (templates/chan.py) apply, the others want one contiguous run ("reduce").
CHAN_REDUCE = "chanreduce"


@dataclass
class KernelPlan:
    """What the templates need to know about one problem's computation."""

    graph: Graph
    kind: str  # "map" | "reduce", or a structured kind such as "gemm" (see `structured`)
    full_shape: tuple[int, ...]
    reduce_dims: tuple[int, ...]
    output: int  # node computed by the kernel (before `out_shape`'s reshape)
    out_shape: tuple[int, ...]  # torch shape of the forward() result
    out_dtype: str
    fmaps: dict[int, FMap | None] = field(default_factory=dict)
    classes: dict[int, str] = field(default_factory=dict)  # node -> "full" | "row" | "const"
    levels: list[list[int]] = field(default_factory=list)  # reduce node ids per level
    outer: list[int] = field(default_factory=list)  # reductions of row values over all rows
    operands: list[int] = field(default_factory=list)  # graph input indices read, kernel order
    operand_shapes: dict[int, tuple[int, ...]] = field(default_factory=dict)  # as the kernel sees
    memo: dict = field(default_factory=dict, repr=False)  # derived facts, computed once
    # structured plans: the anchor node (matmul, pooling window, scan...) the epilogue reads,
    # and what its template needs to know about it (e.g. a `GemmInfo`)
    anchor: int | None = None
    info: Any = None
    anchor_flops: int = 0  # arithmetic of the anchor itself (2*M*N*K for a matmul)
    # a program stage whose output buffer every reader can read channels-last (`ir/layout.py`):
    # its library template may keep cuDNN's channels-last product as it is
    nhwc_out: bool = False
    # a program stage whose output is a buffer later stages read (not the program's result):
    # a bare library product may be its whole computation (`templates/library.py`)
    feeds_stage: bool = False
    # ... and every reader plans in the buffer's memory order too (`Stage.nhwc_mo_plan`)
    nhwc_mo_out: bool = False
    # the output stored permuted (`ir/layout.memory_order_graph`: a stage computed in a
    # channels-last buffer's memory order writes torch's layout): output dim j is dim
    # out_perm[j] of the kernel's value `output`; templates that write full outputs through
    # `codegen.out_index` apply, the others refuse the plan
    out_perm: tuple[int, ...] | None = None

    def anchor_id(self) -> int:
        """The anchor of a structured plan (whose templates read it)."""
        assert self.anchor is not None, f"a {self.kind} plan has no anchor"
        return self.anchor

    def fmap(self, node: int) -> FMap:
        """The fmap of a node placed in F: not an input read only through a view (fmap None),
        which the planners check before they read this."""
        fm = self.fmaps[node]
        assert fm is not None, f"node {node} is read only through a view"
        return fm

    def cached(self, key: object, fn):  # noqa: ANN001 - tiny memo helper for templates
        if key not in self.memo:
            self.memo[key] = fn()
        return self.memo[key]

    # -- the (O, R, I) view -------------------------------------------------------------------
    def _view(self) -> tuple:
        """(full_shape, reduce_dims, O, R, I, numel), computed once for the current shape: the
        templates' validity checks read these millions of times while a space is enumerated."""
        v = self.memo.get("_view")
        if v is None or v[0] is not self.full_shape or v[1] is not self.reduce_dims:
            fs, rd = self.full_shape, self.reduce_dims
            # O: the kept dims before the last reduced one (a chanreduce keeps a middle run)
            O = math.prod(s for d, s in enumerate(fs[: rd[-1]]) if d not in rd) if rd else 1
            R = math.prod(fs[d] for d in rd) if rd else 1
            I = math.prod(fs[rd[-1] + 1:]) if rd else 1  # noqa: E741
            v = self.memo["_view"] = (fs, rd, O, R, I, math.prod(fs))
        return v

    @property
    def O(self) -> int:  # noqa: N802 - the standard names of this view
        return self._view()[2]

    @property
    def R(self) -> int:  # noqa: N802
        return self._view()[3]

    @property
    def I(self) -> int:  # noqa: N802, E743
        return self._view()[4]

    @property
    def numel(self) -> int:
        return self._view()[5]

    @property
    def output_is_row(self) -> bool:
        """No full output to write: one value per row, or one in all (`output_is_total`)."""
        return self.classes.get(self.output) in ("row", "total")

    @property
    def output_is_total(self) -> bool:
        return self.classes.get(self.output) == "total"

    @property
    def whole_rows_only(self) -> bool:
        """Totals over all rows and class picks (an ``iota``) are written for templates in
        which a thread group owns whole rows (row.py); the others do not apply."""
        return self.cached("whole_rows_only", lambda: bool(self.outer) or any(
            n.op == "iota" for n in self.live_nodes()))

    @property
    def family(self) -> str:
        """Coarse op family, used for reports and for the space's templates."""
        if self.kind == "map":
            return "elementwise"
        if self.kind not in ("reduce", CHAN_REDUCE):
            return self.kind
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

    def live_nodes(self) -> list[Node]:
        """The nodes this kernel computes from its operands (a structured plan's anchor is a
        leaf: what feeds it is the template's business, not the epilogue's)."""
        return [n for n in self.graph.live() if n.id in self.fmaps]

    def arithmetic_nodes(self) -> list[Node]:
        """Every node whose arithmetic the kernel renders: `live_nodes`, and the elementwise
        prologue a structured plan's template applies as it loads (a pool's, `PoolPrologue`),
        which has no place in the iteration space."""
        prologue = getattr(self.info, "prologue", None)
        extra = [self.graph[k] for k in getattr(prologue, "nodes", ())]
        return self.live_nodes() + extra

    def uses_transcendental(self) -> bool:
        return any(uses_transcendental(n.op) for n in self.arithmetic_nodes())

    def fast_math_matters(self) -> bool:
        """Whether some computed node renders differently under fast math (__expf,
        __fdividef, ...): where none does, a fast-math slot would only make twin kernels
        (x ** 2 is x * x either way; erff has no fast form)."""
        def differs(n: Node) -> bool:
            if not is_elementwise(n.op):
                return False
            args = ["a_", "b_", "c_"][:len(n.args)]
            return render(n.op, args, dict(n.attrs), True) != render(n.op, args, dict(n.attrs),
                                                                     False)
        return self.cached("fast_math_matters",
                           lambda: any(differs(n) for n in self.arithmetic_nodes()))

    def is_index_output(self) -> bool:
        return self.out_dtype == INDEX_DTYPE

    def bytes_moved(self) -> int:
        """Fewest bytes any kernel must move: each operand read once, the output written once."""
        total = 0
        for k in self.operands:
            total += math.prod(self.operand_shapes[k]) * element_bytes(self.graph.inputs[k].dtype)
        out_elems = math.prod(self.out_shape) if self.out_shape else 1
        return total + out_elems * element_bytes(self.out_dtype)

    def flops(self) -> int:
        """Arithmetic per the IR (one per elementwise op and per reduction step), a floor."""
        count = self.anchor_flops
        for n in self.live_nodes():
            if is_elementwise(n.op) or n.op == "reduce":
                count += self.numel if self.classes.get(n.id) == "full" or n.op == "reduce" \
                    else self.O * self.I
        return count


def _right_aligned(shape: tuple[int, ...], rank: int) -> FMap:
    off = rank - len(shape)
    return tuple(None if s == 1 else k + off for k, s in enumerate(shape))


def _broadcast_fmap(shape: tuple[int, ...], full_shape: tuple[int, ...]) -> FMap | None:
    """fmap of a tensor read as it is (right-aligned, torch broadcasting) in F, or None when
    it does not broadcast to F that way."""
    rank = len(full_shape)
    fm = _right_aligned(shape, rank)
    if len(shape) > rank or any(f is not None and full_shape[f] != s for f, s in zip(fm, shape)):
        return None
    return fm


def _merge(node: Node, parts: list[tuple[tuple[int, ...], FMap]]) -> FMap:
    """fmap of an elementwise node from its operands' shapes and fmaps (torch broadcasting)."""
    rank = len(node.shape)
    out: list = [None] * rank
    for shape, fmap in parts:
        off = rank - len(shape)
        for j, size in enumerate(shape):
            f = fmap[j]
            # a dim of size 1, or one the value was broadcast along (an expand, zeros_like:
            # the same value all along it), constrains nothing
            if size == 1 or f is None:
                continue
            if out[j + off] is None:
                out[j + off] = f
            elif out[j + off] != f:
                raise UnsupportedError(
                    "unsupported: a reduced value is broadcast along a different dimension "
                    "than it was reduced over (cross-row access); fusion of this pattern is "
                    "not supported")
    return tuple(out)


def _read_through_permute(plan: KernelPlan, live: list[Node], n: Node,
                          reduce_dims: tuple[int, ...]) -> FMap:
    """fmap of a permute of an input (x.transpose(1, 2) in an elementwise chain or a
    softmax): the input is read in place with its dims carried to the permuted places; a
    permute of a computed value (data movement between two kernels) is refused."""
    graph = plan.graph
    src = graph[n.args[0]]
    fm = _broadcast_fmap(n.shape, plan.full_shape)
    if src.op != "input" or fm is None:
        raise UnsupportedError("unsupported: a permute of a computed value inside a kernel "
                               f"({graph[n.args[0]].shape} -> {n.shape})")
    if any(m.id != n.id and src.id in m.args for m in live):
        raise UnsupportedError(f"unsupported: input {src.shape} read both as is and permuted")
    src_fm: list[int | None] = [None] * len(src.shape)
    for j, p in enumerate(n.attr("perm")):
        src_fm[p] = fm[j]
    plan.fmaps[src.id] = tuple(src_fm)
    plan.classes[src.id] = _varying_class(plan, tuple(src_fm), reduce_dims)
    return fm


def _place_inputs_by_context(plan: KernelPlan, n: Node, reduce_dims: tuple[int, ...]) -> None:
    """Give an input of elementwise node `n` that does not broadcast to F right-aligned the
    place `n`'s other operands give its dims (or raise): a (B, D) input added to a value
    computed in F = (B, 1, 1, D) and squeezed back to (B, D) (an instance norm of an
    unsqueezed matrix, then a residual) runs along F's dims 0 and 3."""
    graph = plan.graph
    missing = [a for a in n.args if plan.fmaps[a] is None]
    known = [(graph[a].shape, a_fm) for a in n.args if (a_fm := plan.fmaps[a]) is not None]
    if not missing:
        return
    context = _merge(n, known) if known and all(graph[a].op == "input" for a in missing) \
        else None
    for a in missing:
        shape = graph[a].shape
        off = len(n.shape) - len(shape)
        fm = None if context is None or off < 0 else tuple(
            None if s == 1 else context[j + off] for j, s in enumerate(shape))
        if fm is None or any(f is None and s != 1 for f, s in zip(fm, shape)) or any(
                s != 1 and s != n.shape[j + off] for j, s in enumerate(shape)):
            raise UnsupportedError(f"unsupported: input of shape {shape} does not broadcast "
                                   f"to {plan.full_shape}")
        plan.fmaps[a] = fm
        plan.classes[a] = _varying_class(plan, fm, reduce_dims)


def _varying_class(plan: KernelPlan, fm: FMap, reduce_dims: tuple[int, ...]) -> str:
    """"full" for a value that varies along the reduced dims (or any value of a map), else
    "row": the class of a plain value by its fmap (the planner's sweep, for an input placed
    after it was first seen)."""
    return "full" if plan.kind == "map" or any(f in reduce_dims for f in fm if f is not None) \
        else "row"


def _view_fmap(src_shape: tuple[int, ...], src_fmap: FMap, shape: tuple[int, ...]) -> FMap | None:
    """fmap through a view that only inserts or removes size-1 dims; None for other views."""
    if [s for s in src_shape if s != 1] != [s for s in shape if s != 1]:
        return None
    carried = iter([f for s, f in zip(src_shape, src_fmap) if s != 1])
    return tuple(None if s == 1 else next(carried) for s in shape)


def make_pattern_plan(graph: Graph) -> KernelPlan:
    """Classify a graph with no structured op into one kernel pattern (a map, a reduction, a
    normalisation), or raise `UnsupportedError` saying why; `planning.make_single_plan` tries
    the structured ops' planners first."""
    out_node = graph[graph.output]
    out_shape = out_node.shape
    kernel_out = graph.output
    # A final reshape of the result is metadata only: compute the source, view it at the end.
    while graph[kernel_out].op == "view":
        kernel_out = graph[kernel_out].args[0]
    # a permute of the computed result (a stage computed in a channels-last buffer's memory
    # order, writing torch's layout): the kernel stores each element at its permuted place
    out_perm = None
    if graph[kernel_out].op == "permute" and graph[graph[kernel_out].args[0]].op != "input":
        out_perm = tuple(graph[kernel_out].attr("perm"))
        kernel_out = graph[kernel_out].args[0]
    live = [n for n in graph.live() if n.id <= kernel_out or n.id == kernel_out]
    keep = {kernel_out}
    for n in reversed(live):
        if n.id in keep:
            keep.update(n.args)
    live = [n for n in live if n.id in keep]
    reduces = [n for n in live if n.op == "reduce"]

    reduces, outer = _split_outer(graph, reduces)
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
        kind = "reduce"
        if list(reduce_dims) != list(range(reduce_dims[0], reduce_dims[-1] + 1)):
            if not _around_kept_run(reduce_dims, len(full_shape)):
                raise UnsupportedError(
                    f"unsupported: reduction over non-adjacent dims {reduce_dims}")
            kind = CHAN_REDUCE  # batch norm's (N, S) around the channels C
    else:
        full_shape = graph[kernel_out].shape
        reduce_dims = ()
        kind = "map"
    rank = len(full_shape)
    plan = KernelPlan(graph, kind, full_shape, reduce_dims, kernel_out, out_shape,
                      graph.store_dtype(), outer=[r.id for r in outer], out_perm=out_perm)
    outer_ids = set(plan.outer)

    # fmaps, classes and levels in one topological sweep
    level_of: dict[int, int] = {}
    for n in live:
        if n.op == "input":
            # None: only usable through a reshape (checked where it is used)
            fm = _broadcast_fmap(n.shape, full_shape)
        elif n.op == "const":
            fm = ()
        elif n.op == "iota":
            fm = _broadcast_fmap(n.shape, full_shape)
        elif n.id in outer_ids:
            _check_outer_body(plan, n)
            fm = (None,) * len(n.shape)
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
            if src.op == "input" and _read_through_view(graph, live, src, n, fm, full_shape):
                # a reshaped input is just another view of its memory, and where it runs in F
                # is decided by its reshaped shape: a (C,) weight viewed as (C, 1, 1) runs along
                # dim 1 even when C equals the last dim's size (its own right-aligned guess)
                fm = _right_aligned(n.shape, rank)
                plan.operand_shapes[src.attr("index")] = n.shape
                plan.fmaps[src.id] = None  # read only through this view (`operand_node`)
                plan.classes.pop(src.id, None)
            if fm is None:
                if src.op == "input":
                    raise UnsupportedError(f"unsupported: reshaped input {n.shape} does not "
                                           f"broadcast to {full_shape}")
                else:
                    raise UnsupportedError(f"unsupported: reshape {src.shape} -> {n.shape} "
                                           "in the middle of the computation")
        elif n.op == "permute":
            fm = _read_through_permute(plan, live, n, reduce_dims)
        elif is_elementwise(n.op):
            _place_inputs_by_context(plan, n, reduce_dims)
            fm = _merge(n, [(graph[a].shape, plan.fmap(a)) for a in n.args])
        else:
            raise UnsupportedError(f"unsupported IR op {n.op}")
        plan.fmaps[n.id] = fm
        if fm is None:
            continue
        if n.op == "const":
            plan.classes[n.id] = "const"
        elif n.id in outer_ids or any(plan.classes.get(a) == "total" for a in n.args):
            plan.classes[n.id] = _total_class(plan, n)
        else:
            plan.classes[n.id] = _varying_class(plan, fm, reduce_dims)
        if n.op == "reduce" and n.id not in outer_ids:
            plan.classes[n.id] = "row"

    if reduces:
        depth = max(level_of.values())
        plan.levels = [[r for r in level_of if level_of[r] == lv] for lv in range(1, depth + 1)]
    if plan.output_is_total:
        pass  # one number: _total_class saw that nothing per row or per element follows it
    elif outer:
        raise UnsupportedError("unsupported: a reduction over all rows that the output does not "
                               "end with (its result is broadcast back over the rows)")
    elif kind == "map" or plan.classes[kernel_out] == "full":
        # a size-1 dim of F is broadcast in every value (fmap None): it moves no element, and
        # the output may drop or add such dims (a squeeze at the end: the same flat order)
        out_shape_k = graph[kernel_out].shape
        out_fm = plan.fmap(kernel_out)
        if [f for f in out_fm if f is not None and full_shape[f] != 1] != \
                [k for k in range(rank) if full_shape[k] != 1] \
                or any(f is None and size != 1 for f, size in zip(out_fm, out_shape_k)):
            raise UnsupportedError("unsupported: the output does not cover the iteration space "
                                   f"{full_shape} (it is broadcast in some dims)")
    else:
        want = tuple(k for k in range(rank) if k not in reduce_dims and full_shape[k] != 1)
        out_shape_k = graph[kernel_out].shape
        out_fm = plan.fmap(kernel_out)
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


def _split_outer(graph: Graph, reduces: list[Node]) -> tuple[list[Node], list[Node]]:
    """(inner, outer) reductions: outer ones reduce a smaller body than the largest reduced
    body, over all of it, to one number (a loss's mean over rows of per-row values)."""
    if not reduces:
        return reduces, []
    biggest = max(math.prod(graph[r.args[0]].shape) for r in reduces)
    inner = [r for r in reduces if math.prod(graph[r.args[0]].shape) == biggest]
    outer = [r for r in reduces if r not in inner]
    for r in outer:
        if r.numel != 1:
            raise UnsupportedError(
                "unsupported: reductions over different shapes or dimensions in one problem "
                f"(a reduction of {graph[r.args[0]].shape} to {r.shape}); multi-kernel "
                "partitioning is not supported yet")
        if r.attr("kind") not in ("sum", "max", "min"):
            raise UnsupportedError(f"unsupported: a {r.attr('kind')} over all rows")
    return inner, outer


def _check_outer_body(plan: KernelPlan, n: Node) -> None:
    """An outer reduction must fold exactly one value per row: a row value varying along every
    kept dim (a value broadcast over some rows would be counted several times)."""
    body = n.args[0]
    kept = {k for k in range(len(plan.full_shape))
            if k not in plan.reduce_dims and plan.full_shape[k] != 1}
    fm = plan.fmaps.get(body)
    if plan.classes.get(body) != "row" or fm is None or \
            {f for f in fm if f is not None} != kept:
        raise UnsupportedError("unsupported: a reduction over all rows of a value that is not "
                               "one per row of the row reductions")


def _total_class(plan: KernelPlan, n: Node) -> str:
    """Class of a node derived from outer reductions: "total", if nothing per row enters it."""
    if n.op not in ("reduce", "view") and not is_elementwise(n.op):
        raise UnsupportedError(f"unsupported: {n.op} after a reduction over all rows")
    if n.op != "reduce" and any(plan.classes.get(a) not in ("total", "const") for a in n.args):
        raise UnsupportedError("unsupported: a reduction over all rows combined with per-row "
                               "values (cross-row access)")
    return "total"


def _around_kept_run(dims: tuple[int, ...], rank: int) -> bool:
    """True if the reduced dims are a leading run and a trailing run around one kept run:
    (0, 2, 3) of (N, C, H, W), batch norm's statistics over everything but the channels."""
    kept = [d for d in range(rank) if d not in dims]
    return bool(kept) and kept[0] > 0 and kept[-1] < rank - 1 and \
        kept == list(range(kept[0], kept[-1] + 1))


def _read_through_view(graph: Graph, live: list[Node], src: Node, view: Node, fm: FMap | None,
                       full_shape: tuple[int, ...]) -> bool:
    """Whether input `src` should be read through `view` at the view's right-aligned place in F
    (rather than at the place its own broadcast guess carries through a size-1 reshape)."""
    ra = _broadcast_fmap(view.shape, full_shape)
    if ra is None:
        return False
    # an input is read through one node (`codegen.operand_node`): the view, or itself
    others = [n for n in live if src.id in n.args and n.id != view.id]
    if fm is None and others:
        raise UnsupportedError(f"unsupported: input {src.shape} read both as is and reshaped "
                               f"to {view.shape}")
    return fm is None or (fm != ra and not others)


def _ancestors(graph: Graph, nid: int) -> set[int]:
    seen, stack = set(), [nid]
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        stack.extend(graph[k].args)
    return seen


def _only_reshaped(graph: Graph, users: list[int], planned: set[int]) -> bool:
    """True when every planned user of a value is a reshape of it."""
    used = [u for u in users if u in planned]
    return bool(used) and all(graph[u].op == "view" for u in used)


def make_anchored_plan(graph: Graph, anchor: int, kind: str, anchor_inputs: list[int],
                       info: Any = None, anchor_flops: int = 0,
                       prologue: bool = False) -> KernelPlan:
    """Plan of a graph built around one structured op (`anchor`: a matmul, a pooling window, a
    scan): its template computes the anchor over the iteration space F = the anchor's shape,
    and everything downstream of it is an elementwise epilogue over F (bias, activation,
    scaling, residual), fused into the same kernel. `anchor_inputs` are the graph input indices
    the anchor reads (through whatever views); the template reads them itself. With
    `prologue`, the anchor's argument expressions (x * mask before a scan) are planned too, as
    elementwise nodes over F that the template computes (`emit_values`) before the anchor.
    """
    out_node = graph[graph.output]
    kernel_out = graph.output
    while graph[kernel_out].op == "view":
        kernel_out = graph[kernel_out].args[0]
    # what the epilogue computes: the output's ancestors, stopping at the anchor
    keep, stack = set(), [kernel_out]
    while stack:
        k = stack.pop()
        if k in keep:
            continue
        keep.add(k)
        if k != anchor:
            stack.extend(graph[k].args)
    if anchor not in keep:
        raise UnsupportedError(f"unsupported: the output does not depend on the {kind}")
    pro = set().union(*(_ancestors(graph, a) for a in graph[anchor].args)) if prologue else set()
    full_shape = graph[anchor].shape
    rank = len(full_shape)
    plan = KernelPlan(graph, kind, full_shape, (), kernel_out, out_node.shape,
                      graph.store_dtype(), anchor=anchor, info=info, anchor_flops=anchor_flops)
    users = graph.users()
    for n in (n for n in graph.nodes if n.id in keep or n.id in pro):
        if n.id == anchor:
            fm: FMap | None = tuple(range(rank))
        elif n.op == "input":
            fm = _broadcast_fmap(n.shape, full_shape)
            if _only_reshaped(graph, users[n.id], keep | pro):
                # read through its reshape (a bias (C,) viewed as (C, 1, 1)): right-aligning
                # the input itself would put C on the last dim when the sizes happen to match
                fm = None
        elif n.op == "const":
            fm = ()
        elif n.op == "tri_mask":  # a function of the last two indices, bound by the template
            fm = _right_aligned(n.shape, rank)
        elif n.op == "view":
            src = graph[n.args[0]]
            if plan.fmaps[src.id] is None and src.op == "input":
                fm = _broadcast_fmap(n.shape, full_shape)
            else:
                fm = _view_fmap(src.shape, plan.fmap(src.id), n.shape)
            if fm is None:
                raise UnsupportedError(f"unsupported: reshape {src.shape} -> {n.shape} after "
                                       f"the {kind}")
        elif is_elementwise(n.op):
            parts = []
            for a in n.args:
                a_fm = plan.fmaps[a]
                if a_fm is None:
                    raise UnsupportedError(f"unsupported: input of shape {graph[a].shape} does "
                                           f"not broadcast to the {kind} output {full_shape}")
                parts.append((graph[a].shape, a_fm))
            fm = _merge(n, parts)
        else:
            what = "a reduction" if n.op == "reduce" else f"op {n.op}"
            raise UnsupportedError(f"unsupported: {what} after the {kind} (fusing it needs "
                                   "multi-kernel partitioning, not supported yet)")
        plan.fmaps[n.id] = fm
        plan.classes[n.id] = "const" if n.op == "const" else "full"
    out_fm = plan.fmap(kernel_out)
    covers = all(f == k or full_shape[k] == 1 for k, f in enumerate(out_fm))
    if len(out_fm) != rank or not covers or graph[kernel_out].shape != full_shape:
        raise UnsupportedError(f"unsupported: the output does not cover the {kind} output "
                               f"{full_shape} (it is broadcast or reshaped)")
    epilogue_inputs = {graph[k].attr("index") for k in keep | pro if graph[k].op == "input"}
    plan.operands = sorted(epilogue_inputs | set(anchor_inputs))
    for k in plan.operands:
        plan.operand_shapes[k] = graph.inputs[k].shape
    return plan
