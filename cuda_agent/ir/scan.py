"""The scan planner: one ``scan`` node (cumsum / cumprod along a dim, maybe reversed or
exclusive), with its argument computed in the kernel (a prologue such as ``x * mask``) and what
follows it fused as an elementwise epilogue (``cumsum(x) - x``).

The iteration space F is the scan's shape, viewed as (O, L, I) with L the scanned dim: O rows of
L steps, each step I contiguous elements. The template reads the scan's argument per element
through `plan.fmaps`, like the epilogue's operands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import UnsupportedError
from .graph import Graph
from .ops import is_elementwise
from .plan import KernelPlan, _ancestors, make_anchored_plan


@dataclass(frozen=True)
class ScanInfo:
    """out[o, l, i] = arg[o, 0, i] op ... op arg[o, l, i] (l in scan order; exclusive: up to
    l - 1, the identity at l = 0)."""

    kind: str  # "sum" | "prod" | "max" | "min"
    dim: int
    reverse: bool
    exclusive: bool
    arg: int  # node id of the scanned value
    O: int  # noqa: N815 - the standard names of this view
    L: int  # noqa: N815
    I: int  # noqa: N815, E741

    @property
    def identity(self) -> str:
        return {"sum": "0.f", "prod": "1.f", "max": "(-CA_INF)", "min": "CA_INF"}[self.kind]

    def op(self, a: str, b: str) -> str:
        """C expression combining an earlier prefix `a` with a later value `b` (max and min
        carry a NaN on, as torch's cummax does)."""
        return {"sum": f"({a} + {b})", "prod": f"({a} * {b})", "max": f"ca_max({a}, {b})",
                "min": f"ca_min({a}, {b})"}[self.kind]


def make_scan_plan(graph: Graph) -> KernelPlan:
    """Plan a graph whose output depends on exactly one ``scan`` node."""
    scans = [n for n in graph.live() if n.op == "scan"]
    if len(scans) != 1:  # structured.planner_for already rejects several; keep the invariant
        raise UnsupportedError(f"unsupported: {len(scans)} scans in one problem")
    scan = scans[0]
    arg = scan.args[0]
    for nid in sorted(_ancestors(graph, arg)):
        n = graph[nid]
        if n.op not in ("input", "const", "view") and not is_elementwise(n.op):
            what = "a reduction" if n.op == "reduce" else f"op {n.op}"
            raise UnsupportedError(f"unsupported: {what} before the scan (fusing it needs "
                                   "multi-kernel partitioning, not supported yet)")
    shape, d = scan.shape, scan.attr("dim")
    info = ScanInfo(scan.attr("kind"), d, bool(scan.attr("reverse")),
                    bool(scan.attr("exclusive")), arg, math.prod(shape[:d]), shape[d],
                    math.prod(shape[d + 1:]))
    # one combine per element; the prologue's arithmetic is counted by the plan itself
    return make_anchored_plan(graph, scan.id, "scan", [], info=info,
                              anchor_flops=math.prod(shape), prologue=True)
