"""The pooling planner: one ``pool`` node (max or average, 1-3 spatial dims) over an input.

The pool reads a graph input (through reshapes, which keep the element order) as
(planes, *spatial): every dim before the spatial ones is folded into one plane index, since a
window never crosses planes. What follows the pool (activation, scaling, bias) is the fused
epilogue of `make_anchored_plan`. What feeds it must be an input: a computed value would have to
be recomputed for every window that reads it, which the template does not do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from .graph import Graph, Node
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


def _source_input(graph: Graph, nid: int) -> Node:
    """The graph input the pool reads, through reshapes only, or raise naming what is there."""
    n = graph[nid]
    while n.op == "view":
        n = graph[n.args[0]]
    if n.op != "input":
        raise UnsupportedError(f"unsupported: pooling of a computed value (op {n.op}); only "
                               "pooling of an input (possibly reshaped) is supported, with "
                               "elementwise ops after the pool")
    return n


def pool_info(graph: Graph, node: Node) -> PoolInfo:
    """Validate one ``pool`` node and describe it for the template."""
    if node.attr("indices"):
        raise UnsupportedError("unsupported: max pooling indices (return_indices=True); only "
                               "the pooled values are supported")
    src = _source_input(graph, node.args[0])
    x_shape = graph[node.args[0]].shape
    rank = int(node.attr("rank"))
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
                    bool(node.attr("count_include_pad")), node.attr("divisor_override"))


def make_pool_plan(graph: Graph) -> KernelPlan:
    """Plan a graph whose output is a pool followed by an elementwise epilogue."""
    node = next(n for n in graph.live() if n.op == "pool")
    info = pool_info(graph, node)
    # one compare or add per window element of every output: the anchor's own arithmetic
    flops = info.out_numel * info.window
    return make_anchored_plan(graph, node.id, "pool", [info.input], info=info,
                              anchor_flops=flops)
