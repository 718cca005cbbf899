"""The pooling planner: one ``pool`` node (max or average, 1-3 spatial dims) over an input.

The pool reads a graph input (through reshapes, which keep the element order) as
(planes, *spatial): every dim before the spatial ones is folded into one plane index, since a
window never crosses planes. What follows the pool (activation, scaling, bias) is the fused
epilogue of `make_anchored_plan`.

What feeds it is an input, or an elementwise prologue over one input of its shape (the
source) and per-plane parameters (a convolution's bias over the channels, scalars): the template
applies it to every element it loads (`PoolPrologue`). That is a deferred convolution epilogue
(`partition.defer_epilogues`): cuDNN's product is the buffer and the pool adds the bias and
the activation as it reads, as torch.compile fuses them, where a stage of its own would write
and read the whole activation once more. Where windows overlap an element is transformed once
per window that reads it: arithmetic, not memory traffic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from .graph import Graph, Node
from .ops import is_elementwise
from .plan import KernelPlan, make_anchored_plan


@dataclass(frozen=True)
class PoolInfo:
    """out[p, *o] = pool over the window at o*stride - padding (+ k*dilation) of in[p, *i]."""

    input: int  # graph input index the window reads
    kind: str  # "max" | "avg" | "wsum" (a depthwise convolution: weights per plane and tap)
    planes: int  # output planes: the product of the output dims before the spatial ones
    in_spatial: tuple[int, ...]
    out_spatial: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool
    count_include_pad: bool
    divisor_override: int | None
    # "wsum" only: the weight's graph input (out_channels, 1, *kernel), the output channels,
    # and output planes per input plane (the depthwise multiplier: input plane = plane / it)
    weight: int = -1
    out_channels: int = 0
    per_plane: int = 1
    # an elementwise prologue applied to every loaded element (None: the input as stored)
    prologue: "PoolPrologue | None" = None

    @property
    def rank(self) -> int:
        return len(self.kernel)

    @property
    def window(self) -> int:
        return math.prod(self.kernel)

    @property
    def in_numel(self) -> int:
        return self.planes // self.per_plane * math.prod(self.in_spatial)

    @property
    def out_numel(self) -> int:
        return self.planes * math.prod(self.out_spatial)


@dataclass(frozen=True)
class PlaneOperand:
    """A prologue parameter: graph input `input`, bound as node `node` (the input node), read
    at offset sum(lead index d * strides[d]) for the plane's lead indices (0: not along d)."""

    node: int
    input: int
    strides: tuple[int, ...]


@dataclass(frozen=True)
class PoolPrologue:
    """The value the pool reads, computed from each loaded element of the source (node
    `source`, bound to the element) and per-plane parameters: node `root`'s expression."""

    root: int
    source: int
    operands: tuple[PlaneOperand, ...]
    lead: tuple[int, ...]  # the pooled value's dims before the spatial ones
    ops: int  # elementwise nodes: arithmetic per loaded element
    # values computed once per plane (a batch norm's rsqrt(var + eps) per channel) that the
    # per-element part reads
    plane_values: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()  # every elementwise node it computes


def through_views(graph: Graph, nid: int) -> Node:
    """The node a chain of reshapes starting at `nid` reshapes (`nid`'s own where none)."""
    n = graph[nid]
    while n.op == "view":
        n = graph[n.args[0]]
    return n


def _plane_strides(shape: tuple[int, ...], x_shape: tuple[int, ...], rank: int
                   ) -> tuple[int, ...] | None:
    """Per lead dim of `x_shape`, the stride of a tensor of `shape` (contiguous, broadcast
    right-aligned to `x_shape`) along it (0 where broadcast), or None where it is not one
    value per plane (it varies along a spatial dim or does not broadcast)."""
    if len(shape) > len(x_shape):
        return None
    full = (1,) * (len(x_shape) - len(shape)) + tuple(shape)
    if any(s != 1 and s != x for s, x in zip(full, x_shape)) or any(s != 1 for s in full[-rank:]):
        return None
    strides, step = [0] * len(full), 1
    for d in reversed(range(len(full))):
        strides[d] = step if full[d] != 1 else 0
        step *= full[d]
    return tuple(strides[:-rank])


def pool_prologue(graph: Graph, value: int, rank: int, leaves: frozenset[int] = frozenset()
                  ) -> PoolPrologue:
    """The elementwise prologue computing `value` (a pool's argument) from one source of its
    full shape (a graph input, or one of `leaves`: a computed value partitioning would put in a
    buffer) and per-plane parameters (inputs and constants through views), or raise naming
    what is not one."""
    x_shape = graph[value].shape
    source: int | None = None
    operands: dict[int, PlaneOperand] = {}
    seen: set[int] = set()
    ops = 0
    full: set[int] = set()  # computed for each element
    per_plane: set[int] = set()  # computed once per plane

    def refuse(why: str) -> UnsupportedError:
        return UnsupportedError(f"unsupported: pooling of a computed value ({why}); only an "
                                "elementwise function of one input of the pooled shape and "
                                "per-plane parameters is computed as the pool loads")

    def leaf(k: int, shape: tuple[int, ...]) -> None:
        """An input or leaf reached through views, seen as a tensor of `shape`."""
        nonlocal source
        base = graph[k] if k in leaves else through_views(graph, k)
        if base.id in leaves or base.op == "input":
            if tuple(shape) == x_shape:  # (a reshape keeps the element count and order)
                if source is not None and source != base.id:
                    raise refuse("two operands of the pooled shape")
                source = base.id
                return
            strides = _plane_strides(shape, x_shape, rank)
            if strides is None:
                raise refuse(f"an operand of shape {tuple(shape)} that varies within a plane")
            old = operands.get(base.id)
            if old is not None and old.strides != strides:
                raise refuse("one operand read in two shapes")
            # (a leaf, computed in another stage, has no input index until it is a buffer)
            index = int(base.attr("index")) if base.op == "input" else -1
            operands[base.id] = PlaneOperand(base.id, index, strides)
        elif base.op != "const":
            raise refuse(f"a reshaped computed value (op {base.op})")

    stack = [value]
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        n = graph[k]
        if n.op == "const":
            continue
        if is_elementwise(n.op) and k not in leaves:
            if n.shape != x_shape:
                # one value per plane (from per-plane operands alone: an operand of the pooled
                # shape is refused below, it does not match this node's shape)
                if _plane_strides(n.shape, x_shape, rank) is None:
                    raise refuse(f"an elementwise value of shape {n.shape}, not the pooled "
                                 f"{x_shape} nor one per plane")
                per_plane.add(k)
            else:
                ops += 1
                full.add(k)
            stack.extend(n.args)
            continue
        base = through_views(graph, k)
        if base.op in ("input", "const") or base.id in leaves or k in leaves:
            leaf(k, n.shape)
        elif n.op == "view" and n.shape == x_shape and graph[n.args[0]].shape == x_shape:
            stack.append(n.args[0])  # a reshape that changes nothing
        else:
            raise refuse(f"op {n.op}")
    if source is None:
        raise refuse("no operand of the pooled shape")
    # the per-plane values an element's arithmetic reads (a reshaped one was refused above)
    plane_values = {a for k in full for a in graph[k].args if a in per_plane}
    return PoolPrologue(value, source, tuple(operands[k] for k in sorted(operands)),
                        tuple(x_shape[:-rank]), ops, tuple(sorted(plane_values)),
                        tuple(sorted(full | per_plane)))


def _source_input(graph: Graph, nid: int) -> Node | None:
    """The graph input the pool reads, through reshapes only, or None: a computed value."""
    n = through_views(graph, nid)
    return n if n.op == "input" else None


def pool_info(graph: Graph, node: Node) -> PoolInfo:
    """Validate one ``pool`` node and describe it for the template."""
    if node.attr("indices"):
        raise UnsupportedError("unsupported: max pooling indices (return_indices=True); only "
                               "the pooled values are supported")
    x_shape = graph[node.args[0]].shape
    rank = int(node.attr("rank"))
    src = _source_input(graph, node.args[0])
    prologue = None
    if src is None:
        prologue = pool_prologue(graph, node.args[0], rank)
        src = graph[prologue.source]
    kernel, stride = tuple(node.attr("kernel")), tuple(node.attr("stride"))
    padding, dilation = tuple(node.attr("padding")), tuple(node.attr("dilation"))
    lead, in_sp = x_shape[:-rank], x_shape[-rank:]
    out_sp = node.shape[-rank:]
    if node.shape[:-rank] != lead:
        raise UnsupportedError(f"unsupported: pooling output {node.shape} does not keep the "
                               f"leading dims of its input {x_shape}")
    for what, vals in (("kernel size", kernel), ("stride", stride), ("dilation", dilation)):
        if any(v < 1 for v in vals):
            raise UnsupportedError(f"unsupported: pooling {what} {list(vals)} (must be >= 1)")
    if any(p < 0 for p in padding):
        raise UnsupportedError(f"unsupported: negative pooling padding {list(padding)}")
    if math.prod(node.shape) == 0 or math.prod(x_shape) == 0:
        raise UnsupportedError(f"unsupported: empty pooling ({x_shape} -> {node.shape})")
    return PoolInfo(src.attr("index"), node.attr("kind"), math.prod(lead), tuple(in_sp),
                    tuple(out_sp), kernel, stride, padding, dilation, bool(node.attr("ceil_mode")),
                    bool(node.attr("count_include_pad")), node.attr("divisor_override"),
                    prologue=prologue)


def make_pool_plan(graph: Graph) -> KernelPlan:
    """Plan a graph whose output is a pool followed by an elementwise epilogue."""
    node = next(n for n in graph.live() if n.op == "pool")
    info = pool_info(graph, node)
    # one compare or add per window element of every output: the anchor's own arithmetic
    flops = info.out_numel * info.window
    reads = [info.input]
    if info.prologue is not None:  # and the prologue's on every element read
        flops += info.in_numel * info.prologue.ops
        reads += [o.input for o in info.prologue.operands]
    return make_anchored_plan(graph, node.id, "pool", reads, info=info, anchor_flops=flops)
